//go:build failpoints

package node_test

// Groups and Actor Join under faults: the reference runtime's bugs 22,
// 24–28 (docs/seed-bugs.md). Run with:
//
//	go test -tags failpoints -run 'SeedBug2[2-8]' ./pkg/node/

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
)

// ---------------------------------------------------------------- failsnap

const failSnapType = "failsnap"

// failSnap is a counter whose Snapshot can be made to fail ("fail"; "heal"
// undoes it): a member whose capture fails during its group's seal.
type failSnap struct {
	N    int  `json:"n"`
	Fail bool `json:"fail,omitempty"`
}

func (f *failSnap) Handle(_ actor.Context, method string, _ [][]byte) ([]byte, error) {
	switch method {
	case "add":
		f.N++
	case "fail", "heal":
		f.Fail = method == "fail"
	case "get":
	default:
		return nil, actor.UnknownMethod(failSnapType, method)
	}
	return json.Marshal(map[string]int{"value": f.N})
}

func (f *failSnap) Snapshot() ([]byte, error) {
	if f.Fail {
		return nil, errors.New("failsnap: snapshot refused")
	}
	return json.Marshal(f)
}

func (f *failSnap) Restore(b []byte) error { return json.Unmarshal(b, f) }

// ---------------------------------------------------------------- helpers

// joinSetup: a 2-node fault mesh; actor/slowlist/<id> holds first and lives
// on src; group/<id> lives on dst.
func joinSetup(t *testing.T, id string) (fm *faultMesh, src, dst *node.Node, c *client.Client, actorName, group string, first []string) {
	t.Helper()
	fm = startFaultMesh(t, 2)
	c = newClient(t, client.Config{Nodes: fm.addrs()})
	actorName, group = "actor/slowlist/"+id, "group/"+id
	first = []string{id + "-a", id + "-b", id + "-c"}
	fill(t, c, actorName, first...)
	src = fm.owner(t, actorName)
	dst = fm.other(t, src)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := dst.CreateGroup(ctx, group); err != nil {
		t.Fatal(err)
	}
	return
}

// notMember asserts that actor is still src's, active, in no group, and
// that group lists nobody.
func notMember(t *testing.T, fm *faultMesh, src *node.Node, actorName, group string) {
	t.Helper()
	a, g := fm.record(t, actorName), fm.record(t, group)
	if a.Record.Owner != src.Self() || a.Record.State != "active" || a.Record.Group != "" || a.Record.Intent != nil {
		t.Errorf("%s after a failed join: %+v, want active on %s in no group", actorName, a.Record, src.Self())
	}
	if len(g.Record.Members) != 0 {
		t.Errorf("%s lists %v after a failed join", group, g.Record.Members)
	}
}

// member asserts that actor joined group on dst, both records at the one
// commit revision.
func member(t *testing.T, fm *faultMesh, dst *node.Node, actorName, group string) {
	t.Helper()
	a, g := fm.record(t, actorName), fm.record(t, group)
	if a.Record.Owner != dst.Self() || a.Record.Group != group || !slices.Equal(g.Record.Members, []string{actorName}) || a.StoreVersion != g.StoreVersion {
		t.Errorf("after the join: %s %+v (sv %d), %s %+v (sv %d)", actorName, a.Record, a.StoreVersion, group, g.Record, g.StoreVersion)
	}
}

func joinCleanups(fm *faultMesh, t *testing.T, n *node.Node, outcome string) float64 {
	return fm.metricSum(t, n, "meshloc_join_cleanups_total", map[string]string{"outcome": outcome})
}

// ---------------------------------------------------------------- bug 22

// Seed bug 22: a group's seal stops every member first, then captures
// them; when one member's capture fails, every member is rolled back — its
// captured and boundary requests back in its mailbox — and nothing is lost
// or executed twice. The group then moves once the member is healed.
func TestSeedBug22_GroupSealRollsBackEveryMember(t *testing.T) {
	fm := startFaultMesh(t, 2)
	n1, n2 := fm.nodes[0], fm.nodes[1]
	a, b, cc := "actor/slowlist/g22a", "actor/failsnap/g22b", "actor/slowlist/g22c"
	makeGroup(t, n1, "group/g22", a, b, cc)
	c := newClient(t, client.Config{Nodes: fm.addrs()})
	fill(t, c, a, "a0", "a1")
	fill(t, c, cc, "c0")
	if _, err := c.Call(context.Background(), b, "fail"); err != nil {
		t.Fatal(err)
	}
	// Requests in flight on two members: a slow one running, others queued
	// behind it (captured at the seal), more arriving after it (boundary).
	var calls []<-chan callResult
	sent := map[string][]string{}
	for _, obj := range []string{a, cc} {
		p := obj[len(obj)-1:]
		calls = append(calls, launch(c, obj, "append", p+"-slow", "400"))
		sent[obj] = append(sent[obj], p+"-slow")
	}
	time.Sleep(50 * time.Millisecond) // the slow appends start running
	for k := range 3 {
		for _, obj := range []string{a, cc} {
			v := fmt.Sprintf("%s-q%d", obj[len(obj)-1:], k)
			calls = append(calls, launch(c, obj, "append", v))
			sent[obj] = append(sent[obj], v)
		}
	}
	rs := waitRelocation(t, relocateAsync(n1, "group/g22", node.RelocateOptions{Target: n2.Self().ID}), 60*time.Second)
	if rs.GetOutcome() != "aborted" || !strings.Contains(rs.GetMessage(), "capture failed") {
		t.Fatalf("relocation %v, want aborted after a failed capture", rs)
	}
	for i, ch := range calls {
		await(t, fmt.Sprintf("call %d", i), ch)
	}
	for _, obj := range []string{a, b, cc} {
		r := fm.record(t, obj)
		if r.Record.Owner != n1.Self() || r.Record.State != "active" || r.Record.Intent != nil || r.Record.LastRelocation == "" {
			t.Errorf("%s after the rolled-back seal: %+v", obj, r.Record)
		}
	}
	// Each member holds what it had, then every request sent, once.
	for obj, first := range map[string][]string{a: {"a0", "a1"}, cc: {"c0"}} {
		items := readItems(t, c, obj)
		if !slices.Equal(items[:len(first)], first) {
			t.Fatalf("%s: %v", obj, items)
		}
		rest := slices.Clone(items[len(first):])
		want := slices.Clone(sent[obj])
		slices.Sort(rest)
		slices.Sort(want)
		if !slices.Equal(rest, want) {
			t.Errorf("%s holds %v after the first items, want each of %v once", obj, items[len(first):], sent[obj])
		}
	}
	fm.checkOutcomeMetric(t, n1, "source", "aborted")
	// Healed, the group moves whole.
	if _, err := c.Call(context.Background(), b, "heal"); err != nil {
		t.Fatal(err)
	}
	rs = waitRelocation(t, relocateAsync(n1, "group/g22", node.RelocateOptions{Target: n2.Self().ID}), 60*time.Second)
	if rs.GetOutcome() != "completed" {
		t.Fatalf("relocation after heal: %v", rs)
	}
	for _, obj := range []string{"group/g22", a, b, cc} {
		if r := fm.record(t, obj); r.Record.Owner != n2.Self() {
			t.Errorf("%s on %s after the move", obj, r.Record.Owner)
		}
	}
	if r, err := c.Call(context.Background(), b, "get"); err != nil || r.Fence.Owner != n2.Self() {
		t.Fatalf("%s after the move: %v %+v", b, err, r)
	}
}

// ---------------------------------------------------------------- bugs 24–28

// Seed bug 24: the join answers its caller once READY is received, not
// after the settlement: here the target's commit is held for 3 s, and the
// caller has its answer while the actor's record is still the source's.
func TestSeedBug24_JoinAnswersAtReady(t *testing.T) {
	fm, src, dst, c, a, g, first := joinSetup(t, "j24")
	arm(t, failpoint.TargetBeforeCommit, "sleep:3s")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gs, err := src.JoinGroup(ctx, g, a, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rec := fm.record(t, a)
	if rec.Record.Owner != src.Self() || rec.Record.State != "relocating" {
		t.Fatalf("the join answered after the commit: %+v", rec.Record)
	}
	if st := gs.GetRelocation(); st == nil || st.GetOutcome() != "" || st.GetRole() != "source" {
		t.Fatalf("the answer's relocation %v, want the source's, in flight", st)
	}
	if src.PendingJoins() != 1 {
		t.Fatalf("pending joins %d, want 1 (the clean-up runs later)", src.PendingJoins())
	}
	waitFor(t, 30*time.Second, "the join's clean-up", func() bool { return src.PendingJoins() == 0 })
	member(t, fm, dst, a, g)
	if items := readItems(t, c, a); !slices.Equal(items, first) {
		t.Errorf("%s after the join: %v", a, items)
	}
	fm.checkOutcomeMetric(t, src, "source", "completed")
	fm.checkOutcomeMetric(t, dst, "target", "completed")
}

// Seed bug 25: a join that fails before the commit resolves its caller and
// its clean-up, and leaves the actor where it was, not in the group —
// before READY (the caller gets the failure) and after it (the source
// preserves at the deadline; the caller had its answer at READY).
func TestSeedBug25_JoinFailureBeforeCommit(t *testing.T) {
	t.Run("before READY", func(t *testing.T) {
		fm, src, _, c, a, g, first := joinSetup(t, "j25a")
		arm(t, failpoint.TargetBeforeReady, "error")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := src.JoinGroup(ctx, g, a, 10*time.Second)
		var je *node.JoinError
		if !errors.As(err, &je) || je.Status.GetOutcome() != "aborted" {
			t.Fatalf("join: %v, want a JoinError (aborted)", err)
		}
		t.Logf("refused: %v", err)
		if n := src.PendingJoins(); n != 0 {
			t.Fatalf("%d joins pending after the failure", n)
		}
		notMember(t, fm, src, a, g)
		fm.serves(t, src, c, a)
		if items := readItems(t, c, a); !slices.Equal(items, first) {
			t.Errorf("%s: %v", a, items)
		}
		if j := src.RecentJoins(); len(j) != 1 || j[0].Outcome != "aborted" {
			t.Errorf("join tombstones %+v", j)
		}
	})
	t.Run("after READY", func(t *testing.T) {
		fm, src, _, c, a, g, first := joinSetup(t, "j25b")
		arm(t, failpoint.TargetBeforeCommit, "error")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := src.JoinGroup(ctx, g, a, 1500*time.Millisecond); err != nil {
			t.Fatalf("join (answered at READY): %v", err)
		}
		waitFor(t, 30*time.Second, "the join's clean-up", func() bool { return src.PendingJoins() == 0 })
		if j := src.RecentJoins(); len(j) != 1 || j[0].Outcome != "aborted" {
			t.Fatalf("join tombstones %+v, want one aborted", j)
		}
		notMember(t, fm, src, a, g)
		fm.serves(t, src, c, a)
		if items := readItems(t, c, a); !slices.Equal(items, first) {
			t.Errorf("%s: %v", a, items)
		}
		fm.checkOutcomeMetric(t, src, "source", "aborted")
	})
}

// Seed bug 26: a join's clean-up is retired exactly once, and its tombstone
// is written only after the clean-up (the source's copy is gone by then).
// (TestSeedBug26_JoinRetiredOnce in join_internal_test.go retires one
// profile from many goroutines at once.)
func TestSeedBug26_JoinCleanupOnce(t *testing.T) {
	fm, src, dst, _, a, g, _ := joinSetup(t, "j26")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := src.JoinGroup(ctx, g, a, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the join's tombstone", func() bool { return len(src.RecentJoins()) == 1 })
	if h := src.Hosted(); h != 0 {
		t.Errorf("tombstone written while the source still hosts %d objects", h)
	}
	member(t, fm, dst, a, g)
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := src.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	if n := joinCleanups(fm, t, src, "completed"); n != 1 || len(src.RecentJoins()) != 1 {
		t.Errorf("clean-ups retired %v times, tombstones %d; want 1 and 1", n, len(src.RecentJoins()))
	}
}

// Seed bug 27: Stop waits for a pending join's clean-up instead of leaking
// it: stopped right after the join answered (its commit held 2 s), the
// source still sees the commit, drops its copy, and counts the relocation
// completed, not shutdown.
func TestSeedBug27_StopWaitsForJoinCleanup(t *testing.T) {
	fm, src, dst, _, a, g, first := joinSetup(t, "j27")
	arm(t, failpoint.TargetBeforeCommit, "sleep:2s")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := src.JoinGroup(ctx, g, a, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if src.PendingJoins() != 1 {
		t.Fatalf("pending joins %d at READY", src.PendingJoins())
	}
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer scancel()
	if err := src.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	if n := src.PendingJoins(); n != 0 {
		t.Fatalf("Stop returned with %d joins pending", n)
	}
	member(t, fm, dst, a, g)
	fm.checkOutcomeMetric(t, src, "source", "completed")
	if n := joinCleanups(fm, t, src, "completed"); n != 1 {
		t.Errorf("join clean-ups retired as completed: %v, want 1", n)
	}
	c := newClient(t, client.Config{Nodes: []string{dst.Address()}})
	if items := readItems(t, c, a); !slices.Equal(items, first) {
		t.Errorf("%s after the join: %v", a, items)
	}
}

// Seed bug 28: after the commit, the join's source is detached: it no
// longer hosts the actor (nor counts it), and a call that reaches it is
// served by the group's node.
func TestSeedBug28_JoinSourceDetached(t *testing.T) {
	fm, src, dst, _, a, g, first := joinSetup(t, "j28")
	if src.Hosted() != 1 {
		t.Fatalf("the source hosts %d objects before the join", src.Hosted())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := src.JoinGroup(ctx, g, a, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the join's clean-up", func() bool { return src.PendingJoins() == 0 })
	if h := src.Hosted(); h != 0 {
		t.Errorf("the source still hosts %d objects after the join", h)
	}
	if v := fm.metricSum(t, src, "meshloc_hosted_objects", nil); v != 0 {
		t.Errorf("the source's meshloc_hosted_objects = %v after the join", v)
	}
	via := newClient(t, client.Config{Nodes: []string{src.Address()}})
	r, err := via.Call(context.Background(), a, "read")
	if err != nil || r.Fence.Owner != dst.Self() {
		t.Fatalf("a call through the source: %v %+v", err, r)
	}
	var got struct {
		Items []string `json:"items"`
	}
	if err := json.Unmarshal(r.Payload, &got); err != nil || !slices.Equal(got.Items, first) {
		t.Fatalf("%s: %s", a, r.Payload)
	}
	member(t, fm, dst, a, g)
}
