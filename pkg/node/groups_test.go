package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/internal/verify"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

func readRec(t testing.TB, c interface {
	Read(context.Context, keyspace.Object) (authority.Snapshot, error)
}, name string) authority.Snapshot {
	t.Helper()
	obj, err := keyspace.ParseObject(name)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := c.Read(context.Background(), obj)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return snap
}

// makeGroup creates group on n with members (actors with no record yet:
// they are created on n as members).
func makeGroup(t testing.TB, n *node.Node, group string, members ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.CreateGroup(ctx, group); err != nil {
		t.Fatalf("create %s: %v", group, err)
	}
	for _, m := range members {
		if _, err := n.JoinGroup(ctx, group, m, 0); err != nil {
			t.Fatalf("join %s to %s: %v", m, group, err)
		}
	}
}

// Group lifecycle through the AdminService: create, join, members, leave;
// refusals are typed and change nothing.
func TestGroupLifecycle(t *testing.T) {
	m := startMesh(t, 1) // n2 joins later: everything is placed on n1 first
	n1 := m.nodes[0]
	st := authority.New(m.etcd, keyspace.Default())
	admin := rpcpb.NewAdminServiceClient(dialNode(t, n1))
	ctx := context.Background()

	gs, err := admin.CreateGroup(ctx, &pb.GroupCommand{Group: "group/g1"})
	if err != nil || gs.GetOwner() != n1.Self().String() || len(gs.GetMembers()) != 0 {
		t.Fatalf("create: %v %v", err, gs)
	}
	if _, err := admin.CreateGroup(ctx, &pb.GroupCommand{Group: "group/g1"}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("create twice: %v", err)
	}
	// A member with no record yet is created on the group's node.
	if gs, err = admin.JoinGroup(ctx, &pb.GroupCommand{Group: "group/g1", Actor: "actor/counter/a"}); err != nil || !slices.Equal(gs.GetMembers(), []string{"actor/counter/a"}) {
		t.Fatalf("join: %v %v", err, gs)
	}
	// An actor this node hosts joins in one transaction.
	c := newClient(t, client.Config{Nodes: []string{n1.Address()}})
	if _, err := c.Call(ctx, "actor/counter/b", "add", "5"); err != nil {
		t.Fatal(err)
	}
	n2 := m.add(t, "n2")
	if gs, err = admin.JoinGroup(ctx, &pb.GroupCommand{Group: "group/g1", Actor: "actor/counter/b"}); err != nil || len(gs.GetMembers()) != 2 {
		t.Fatalf("join b: %v %v", err, gs)
	}
	if r := readRec(t, st, "actor/counter/b"); r.Record.Group != "group/g1" {
		t.Fatalf("b's record %+v", r.Record)
	}
	// The member keeps its state and serves.
	r, err := c.Call(ctx, "actor/counter/b", "add", "1")
	if err != nil || value(t, r) != 6 {
		t.Fatalf("member call: %v %v", err, r)
	}
	// "members" on the group itself, through any node.
	c2 := newClient(t, client.Config{Nodes: []string{n2.Address()}})
	r, err = c2.Call(ctx, "group/g1", "members")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Group, Owner string
		Members      []string
	}
	if err := json.Unmarshal(r.Payload, &got); err != nil || got.Owner != n1.Self().String() || !slices.Equal(got.Members, []string{"actor/counter/a", "actor/counter/b"}) {
		t.Fatalf("members: %s %v", r.Payload, err)
	}
	if _, err := c2.Call(ctx, "group/g1", "add", "1"); err == nil {
		t.Fatal("a group answered a method other than members")
	}

	before := readRec(t, st, "group/g1")
	refusals := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"join twice", func() error {
			_, err := admin.JoinGroup(ctx, &pb.GroupCommand{Group: "group/g1", Actor: "actor/counter/a"})
			return err
		}, codes.Aborted},
		{"join a group to a group", func() error {
			_, err := admin.JoinGroup(ctx, &pb.GroupCommand{Group: "group/g1", Actor: "group/g2"})
			return err
		}, codes.InvalidArgument},
		{"join to a missing group", func() error {
			_, err := admin.JoinGroup(ctx, &pb.GroupCommand{Group: "group/nope", Actor: "actor/counter/z"})
			return err
		}, codes.NotFound},
		{"join at a node that owns neither", func() error {
			_, err := rpcpb.NewAdminServiceClient(dialNode(t, n2)).JoinGroup(ctx, &pb.GroupCommand{Group: "group/g1", Actor: "actor/counter/z"})
			return err
		}, codes.FailedPrecondition},
		{"leave a non-member", func() error {
			_, err := admin.LeaveGroup(ctx, &pb.GroupCommand{Group: "group/g1", Actor: "actor/counter/z"})
			return err
		}, codes.Aborted},
		{"bad name", func() error {
			_, err := admin.LeaveGroup(ctx, &pb.GroupCommand{Group: "group/g 1", Actor: "actor/counter/a"})
			return err
		}, codes.InvalidArgument},
		{"relocate a member alone", func() error {
			_, err := admin.Relocate(ctx, &pb.RelocateCommand{Object: "actor/counter/b"})
			return err
		}, codes.FailedPrecondition},
	}
	for _, tc := range refusals {
		if err := tc.call(); status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
	if after := readRec(t, st, "group/g1"); after.StoreVersion != before.StoreVersion {
		t.Fatalf("a refusal wrote the group")
	}
	if _, err := n1.Relocate(ctx, "actor/counter/b", node.RelocateOptions{}); !errors.Is(err, node.ErrGroupMember) {
		t.Fatalf("relocate a member alone: %v", err)
	}

	// Leave: b is an ordinary actor again and may move alone.
	if gs, err = admin.LeaveGroup(ctx, &pb.GroupCommand{Group: "group/g1", Actor: "actor/counter/b"}); err != nil || len(gs.GetMembers()) != 1 {
		t.Fatalf("leave: %v %v", err, gs)
	}
	if rs, err := n1.Relocate(ctx, "actor/counter/b", node.RelocateOptions{}); err != nil || rs.GetOutcome() != "completed" {
		t.Fatalf("relocate after leave: %v %v", err, rs)
	}
	if r, err := c.Call(ctx, "actor/counter/b", "get"); err != nil || value(t, r) != 6 {
		t.Fatalf("b after its move: %v %v", err, r)
	}
}

// A group of 1 + 20 counter members moves atomically under a call load: a
// watch audit of etcd from the start checks that at no revision are members
// split between owners (and the rest of docs/design.md §9), and every counter
// holds exactly its acknowledged adds after the moves.
func TestGroupMovesAtomically(t *testing.T) {
	m := startMesh(t, 3)
	n1 := m.nodes[0]
	ctx := context.Background()
	keys := keyspace.Default()
	audit, err := verify.StartAudit(ctx, m.etcd, keys, 0)
	if err != nil {
		t.Fatal(err)
	}
	const members = 20
	var names []string
	for i := range members {
		names = append(names, fmt.Sprintf("actor/counter/gm%02d", i))
	}
	makeGroup(t, n1, "group/big", names...)

	// Load: workers add 1 to random members through every node; each add
	// acknowledged is counted, each that failed or timed out is unknown.
	acked := make([]atomic.Int64, members)
	unknown := make([]atomic.Int64, members)
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range 6 {
		c := newClient(t, client.Config{Nodes: m.addrs()})
		wg.Go(func() {
			for k := 0; lctx.Err() == nil; k++ {
				i := (w*7 + k*3) % members
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := c.Call(cctx, names[i], "add", "1")
				cancel()
				if err != nil {
					if unknown[i].Add(1) == 1 {
						t.Logf("%s: %v", names[i], err)
					}
					continue
				}
				acked[i].Add(1)
			}
		})
	}
	// Moves: the group hops between the nodes under the load.
	st := authority.New(m.etcd, keys)
	moves := 0
	for hop := range 6 {
		time.Sleep(150 * time.Millisecond)
		owner := readRec(t, st, "group/big").Record.Owner
		var src *node.Node
		for _, n := range m.nodes {
			if n.Self() == owner {
				src = n
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		rs, err := src.Relocate(rctx, "group/big", node.RelocateOptions{Target: m.nodes[(hop+1)%3].Self().ID})
		cancel()
		if err != nil && !errors.Is(err, node.ErrNoTarget) {
			t.Fatalf("hop %d: %v", hop, err)
		}
		if rs.GetOutcome() == "completed" {
			moves++
		}
		t.Logf("hop %d: %s → %s: %s %s interruption %dµs payload %d bytes", hop, rs.GetSource(), rs.GetTarget(), rs.GetOutcome(), rs.GetMessage(), rs.GetInterruptionUs(), rs.GetPayloadBytes())
	}
	time.Sleep(100 * time.Millisecond)
	stop()
	wg.Wait()
	if moves < 3 {
		t.Fatalf("only %d of 6 group moves completed", moves)
	}

	// Every member on the group's owner, every counter exact.
	g := readRec(t, st, "group/big")
	if len(g.Record.Members) != members {
		t.Fatalf("group lists %d members", len(g.Record.Members))
	}
	c := newClient(t, client.Config{Nodes: m.addrs()})
	var total, totalUnknown int64
	for i, name := range names {
		r := readRec(t, st, name)
		if r.Record.Owner != g.Record.Owner || r.Record.Group != "group/big" {
			t.Errorf("%s: owner %s group %q; the group's owner %s", name, r.Record.Owner, r.Record.Group, g.Record.Owner)
		}
		rep, err := c.Call(ctx, name, "get")
		if err != nil {
			t.Fatalf("get %s: %v", name, err)
		}
		v, a, u := value(t, rep), acked[i].Load(), unknown[i].Load()
		if v < a || v > a+u {
			t.Errorf("%s = %d, acknowledged %d, unknown %d", name, v, a, u)
		}
		total += a
		totalUnknown += u
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res := audit.Stop(actx)
	if !res.Complete() {
		t.Fatalf("audit incomplete: %s", res.Err)
	}
	for _, v := range res.Violations {
		t.Errorf("audit: %s", v)
	}
	if res.GroupSplits != 0 || res.TwoOwnerWindows != 0 {
		t.Errorf("group splits %d, two-owner windows %d", res.GroupSplits, res.TwoOwnerWindows)
	}
	t.Logf("%d moves; %d adds acknowledged, %d unknown; audit: %d events, transitions %v, group splits %d, two-owner windows %d",
		moves, total, totalUnknown, res.Events, res.Transitions, res.GroupSplits, res.TwoOwnerWindows)
}

// The size limit is enforced up front: with --max-txn-ops 10 a group takes
// 6 members; the 7th join is refused with a typed error naming the limit,
// and so is the relocation of a larger group; nothing is written.
func TestGroupTooLargeRefused(t *testing.T) {
	m := startMesh(t, 2, func(_ int, c *node.Config) { c.MaxTxnOps = 10 })
	n1 := m.nodes[0]
	st := authority.New(m.etcd, keyspace.Default())
	ctx := context.Background()
	var names []string
	for i := range 6 {
		names = append(names, fmt.Sprintf("actor/counter/t%d", i))
	}
	makeGroup(t, n1, "group/small", names...)
	before := readRec(t, st, "group/small")
	_, err := n1.JoinGroup(ctx, "group/small", "actor/counter/t8", 0)
	var tl *authority.GroupTooLargeError
	if !errors.As(err, &tl) || tl.Max != 6 {
		t.Fatalf("7th member: %v", err)
	}
	t.Logf("refused: %v", err)
	if after := readRec(t, st, "group/small"); after.StoreVersion != before.StoreVersion {
		t.Fatal("the refused join wrote the group")
	}
	if _, err := st.Read(ctx, keyspace.Actor("counter", "t8")); !errors.Is(err, authority.ErrNotFound) {
		t.Fatalf("the refused join created the actor: %v", err)
	}
	// Through the AdminService: ResourceExhausted.
	_, err = rpcpb.NewAdminServiceClient(dialNode(t, n1)).JoinGroup(ctx, &pb.GroupCommand{Group: "group/small", Actor: "actor/counter/t8"})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("admin join: %v", err)
	}
	// A group that grew past the node's limit elsewhere (written with
	// etcd's default limits) is not relocated: refused before any write.
	g := readRec(t, st, "group/small")
	res, err := st.Join(ctx, authority.MembershipRequest{Group: g, Actor: keyspace.Actor("counter", "t9"), Owner: n1.Self(), Node: authority.NodeRef{Address: n1.Address()}})
	if err != nil || !res.Written {
		t.Fatalf("join with default limits: %v %+v", err, res)
	}
	before = readRec(t, st, "group/small")
	// The node plans from the group record its location cache holds: until
	// the join above reaches it, it plans from the record of 6 members,
	// whose intent then fails its compare with etcd's and writes nothing.
	waitFor(t, 10*time.Second, "the relocation refused for the group's size", func() bool {
		rs, err := n1.Relocate(ctx, "group/small", node.RelocateOptions{})
		if errors.Is(err, authority.ErrGroupTooLarge) {
			return true
		}
		if err != nil || rs.GetOutcome() == "completed" {
			t.Fatalf("relocate over the limit: %v %v", rs, err)
		}
		return false
	})
	if after := readRec(t, st, "group/small"); after.StoreVersion != before.StoreVersion || after.Record.Intent != nil {
		t.Fatal("the refused relocation wrote the group")
	}
}

// Actor Join: an actor on one node joins a group on another; it is
// relocated there with its state, the commit writes the membership, and
// the join answers with the relocation it started.
func TestActorJoin(t *testing.T) {
	m := startMesh(t, 2)
	st := authority.New(m.etcd, keyspace.Default())
	ctx := context.Background()
	c := newClient(t, client.Config{Nodes: m.addrs()})
	if _, err := c.Call(ctx, "actor/counter/j", "add", "7"); err != nil {
		t.Fatal(err)
	}
	src := m.owner(t, "actor/counter/j")
	dst := m.nodes[0]
	if dst == src {
		dst = m.nodes[1]
	}
	makeGroup(t, dst, "group/home")
	gs, err := src.JoinGroup(ctx, "group/home", "actor/counter/j", 0)
	if err != nil {
		t.Fatal(err)
	}
	if gs.GetRelocation() == nil || gs.GetOwner() != dst.Self().String() || !slices.Equal(gs.GetMembers(), []string{"actor/counter/j"}) {
		t.Fatalf("join answer %v", gs)
	}
	waitFor(t, 20*time.Second, "the join's clean-up", func() bool { return src.PendingJoins() == 0 })
	a, g := readRec(t, st, "actor/counter/j"), readRec(t, st, "group/home")
	if a.Record.Owner != dst.Self() || a.Record.Group != "group/home" || !slices.Equal(g.Record.Members, []string{"actor/counter/j"}) || a.StoreVersion != g.StoreVersion {
		t.Fatalf("after the join: actor %+v (sv %d), group %+v (sv %d)", a.Record, a.StoreVersion, g.Record, g.StoreVersion)
	}
	r, err := c.Call(ctx, "actor/counter/j", "add", "1")
	if err != nil || value(t, r) != 8 || r.Fence.Owner != dst.Self() {
		t.Fatalf("after the join: %v %+v", err, r)
	}
	if j := src.RecentJoins(); len(j) != 1 || j[0].Outcome != "completed" {
		t.Fatalf("join tombstones %+v", j)
	}
}

// waitFor is waitUntil for a condition with nothing to say.
func waitFor(t testing.TB, within time.Duration, what string, ok func() bool) {
	t.Helper()
	waitUntil(t, within, what, func() error {
		if ok() {
			return nil
		}
		return errors.New("not yet")
	})
}

// dialNode is a gRPC connection to n, closed when the test ends.
func dialNode(t testing.TB, n *node.Node) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(n.Address(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// A group whose owner died is recovered whole: the first call to any member
// re-creates the group and every member on one live node, in one
// transaction (their state is lost and said so), never splitting the group.
func TestGroupRecoveredWhole(t *testing.T) {
	m := startMesh(t, 3)
	n1 := m.nodes[0]
	ctx := context.Background()
	audit, err := verify.StartAudit(ctx, m.etcd, keyspace.Default(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range 5 {
		names = append(names, fmt.Sprintf("actor/counter/rw%d", i))
	}
	makeGroup(t, n1, "group/rw", names...)
	st := authority.New(m.etcd, keyspace.Default())
	c := newClient(t, client.Config{Nodes: []string{m.nodes[1].Address(), m.nodes[2].Address()}})
	for _, n := range names {
		if _, err := c.Call(ctx, n, "add", "1"); err != nil {
			t.Fatal(err)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if err := n1.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	// Every member answers again (after a StateLost for the lost generation).
	for _, n := range names {
		waitFor(t, 20*time.Second, n+" served again", func() bool {
			r, err := c.Call(ctx, n, "get")
			return err == nil && r.Fence.ObjectGeneration == 2
		})
	}
	g := readRec(t, st, "group/rw")
	if g.Record.Owner.ID == "n1" || g.Record.ObjectGeneration != 2 {
		t.Fatalf("group after its owner died: %+v", g.Record)
	}
	for _, n := range names {
		if r := readRec(t, st, n); r.Record.Owner != g.Record.Owner || r.Record.Group != "group/rw" || r.Record.ObjectGeneration != 2 {
			t.Errorf("%s: %+v; group on %s", n, r.Record, g.Record.Owner)
		}
	}
	actx, acancel := context.WithTimeout(ctx, 30*time.Second)
	defer acancel()
	res := audit.Stop(actx)
	for _, v := range res.Violations {
		t.Errorf("audit: %s", v)
	}
	if res.GroupSplits != 0 || res.Transitions["recover"] != 6 {
		t.Errorf("group splits %d, recoveries %d (want 0 and 6: the group and its 5 members)", res.GroupSplits, res.Transitions["recover"])
	}
}

// A drain moves a node's groups whole: a member it meets moves with its
// group (a member cannot move alone, and must not be lost when the node
// stops).
func TestDrainMovesGroups(t *testing.T) {
	m := startMesh(t, 2)
	n1, n2 := m.nodes[0], m.nodes[1]
	var names []string
	for i := range 4 {
		names = append(names, fmt.Sprintf("actor/counter/dg%d", i))
	}
	makeGroup(t, n1, "group/dg", names...)
	makeGroup(t, n1, "group/empty")
	ctx := context.Background()
	c := newClient(t, client.Config{Nodes: m.addrs()})
	for i, n := range names {
		if _, err := c.Call(ctx, n, "add", fmt.Sprint(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	rep, err := n1.Drain(dctx, node.DrainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Failed) != 0 || n1.Hosted() != 0 {
		t.Fatalf("drain: failed %+v, %d objects still hosted", rep.Failed, n1.Hosted())
	}
	st := authority.New(m.etcd, keyspace.Default())
	for _, o := range append([]string{"group/dg"}, names...) {
		if r := readRec(t, st, o); r.Record.Owner != n2.Self() {
			t.Errorf("%s on %s after the drain", o, r.Record.Owner)
		}
	}
	for i, n := range names {
		r, err := c.Call(ctx, n, "get")
		if err != nil || value(t, r) != int64(i+1) {
			t.Errorf("%s after the drain: %v %v", n, err, r)
		}
	}
	// An empty group is no hosted object: it stays on n1 (relocate it by name).
	if r := readRec(t, st, "group/empty"); r.Record.Owner != n1.Self() {
		t.Errorf("group/empty on %s", r.Record.Owner)
	}
	if rs, err := n1.Relocate(ctx, "group/empty", node.RelocateOptions{}); err != nil || rs.GetOutcome() != "completed" {
		t.Fatalf("relocate an empty group: %v %v", err, rs)
	}
}
