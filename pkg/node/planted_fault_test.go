//go:build failpoints

package node_test

// Planted bugs (internal/failpoint: Planted, Plant; docs/verification.md,
// "Planted bugs"). Each test shows the mechanism of one bug with its trigger
// on in-process nodes: correct, the trigger does no harm; planted, the bad
// outcome happens. The verification suite (internal/chaos) runs the same
// triggers on real processes and must catch every bug.
//
// Run with: go test -tags failpoints -run Planted ./pkg/node/

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/internal/tcpproxy"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// bothWays runs f once with bug not planted ("correct") and once planted.
func bothWays(t *testing.T, bug string, f func(t *testing.T, planted bool)) {
	for _, planted := range []bool{false, true} {
		name := "correct"
		if planted {
			name = "planted"
		}
		t.Run(name, func(t *testing.T) {
			if planted {
				t.Cleanup(failpoint.Plant(bug)) // registered first: undone after the nodes stopped
			}
			f(t, planted)
		})
	}
}

// directCall sends one call straight to n as the owner (no retry, no
// routing): the raw gRPC outcome.
func directCall(ctx context.Context, t *testing.T, n *node.Node, op wire.OperationID, object, method string, args ...string) (*pb.CallReply, error) {
	t.Helper()
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	return rpcpb.NewCallServiceClient(dial(t, n)).Call(ctx, &pb.CallRequest{
		Version: wire.Version, Object: object, Method: method, Args: b, OperationId: op[:], Direct: true})
}

// etcdProxy is a TCP proxy between one node and the mesh's etcd. Its
// cleanup (after the node stopped) closes it; heal restores the link.
func etcdProxy(t *testing.T, fm *faultMesh) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.New("127.0.0.1:0", strings.TrimPrefix(fm.ep, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func viaProxy(p *tcpproxy.Proxy) func(int, *node.Config) {
	return func(_ int, c *node.Config) { c.EtcdEndpoints = []string{"http://" + p.Addr()} }
}

// heal forwards every byte again and restarts the connections (a stream that
// lost bytes is broken), so that the node behind p stops promptly.
func heal(t *testing.T, p *tcpproxy.Proxy) {
	t.Cleanup(func() {
		p.SetDelays(0, 0)
		p.SetMode(tcpproxy.Forward)
		p.ResetConns()
	})
}

// ---------------------------------------------------------------- ack-before-commit

// Trigger: every commit fails (target.before-commit=error) until the source
// preserves at its deadline. Correct: the target runs nothing before its
// commit; the source reopens and runs the captured and DATA requests once.
// Planted: the target runs them and relays their replies before the commit
// that never lands — the callers are acknowledged by a node that never owned
// the object — and the source runs them again.
//
// (error%3 alone does not expose it: a failed commit is uncertain, read back
// and retried, and the retry is not the 3rd hit: the commit lands 50 ms
// later and the early replies turn out right.)
func TestPlantedAckBeforeCommit(t *testing.T) {
	bothWays(t, failpoint.BugAckBeforeCommit, func(t *testing.T, planted bool) {
		fm := startFaultMesh(t, 2)
		c := newClient(t, client.Config{Etcd: fm.etcd})
		obj := fmt.Sprintf("actor/slowlist/ackfirst%v", planted)
		fill(t, c, obj, "a")
		src := fm.owner(t, obj)
		dst := fm.other(t, src)
		arm(t, failpoint.TargetBeforeCommit, "error")

		run := time.Now().UnixNano() // values unique to this run: slowListRuns counts for the whole process
		v := func(s string) string { return fmt.Sprintf("abc-%d-%s", run, s) }
		order, calls, reloc := sealScenario(c, src, obj, []string{v("q1"), v("q2")}, []string{v("d1"), v("d2")},
			node.RelocateOptions{Target: dst.Self().ID, Timeout: 4 * time.Second})
		st := waitRelocation(t, reloc, 30*time.Second)
		if st.GetOutcome() != "aborted" {
			t.Fatalf("relocation %s %v (%s), want aborted: no commit can land", st.GetOutcome(), st.GetCode(), st.GetMessage())
		}
		if rec := fm.record(t, obj).Record; rec.Owner != src.Self() || rec.AuthorityGeneration != 1 {
			t.Fatalf("record %+v: want still owned by the source", rec)
		}
		if ta := targetAttempt(t, dst, obj, 5*time.Second); ta.GetCode() != pb.Code_CODE_STALE_FENCE {
			t.Fatalf("target attempt %s %v (%s), want its commit refused after the preserve", ta.GetOutcome(), ta.GetCode(), ta.GetMessage())
		}
		for i, ch := range calls[1:] { // calls[0] ran before the seal
			name := order[i+1]
			r := await(t, name, ch)
			if r.rep == nil {
				continue
			}
			runs := slowListRuns.get(name)
			if !planted {
				if r.rep.Fence.Owner != src.Self() || runs != 1 {
					t.Errorf("%s: answered by %s, executed %d times; want by the source, once", name, r.rep.Fence.Owner, runs)
				}
				continue
			}
			if r.rep.Fence.Owner != dst.Self() || runs != 2 {
				t.Errorf("%s: answered by %s, executed %d times; want acknowledged by the target before its commit, then run again by the source", name, r.rep.Fence.Owner, runs)
			}
		}
		if !planted {
			if items, want := readItems(t, c, obj), append([]string{"a"}, order...); !slices.Equal(items, want) {
				t.Errorf("items %q, want %q", items, want)
			}
			fm.serves(t, src, c, obj)
		}
		// Planted, the callers now hold the fence of a commit that never
		// happened: the source's own replies look stale to them.
	})
}

// ---------------------------------------------------------------- no-generation-check

// Trigger: the owner dies with its state (kill -9; here Stop: the owner key
// goes at once, as after a kill -9 and its TTL). Correct: the call that
// re-creates the object, and a call of a client that knew the old object
// generation, are answered STATE_LOST. Planted: both are served on the empty
// re-created object as if nothing happened; and gateways (and clients:
// pkg/client TestAcceptRefusesOlderFence) accept replies with older fences.
func TestPlantedNoGenerationCheck(t *testing.T) {
	bothWays(t, failpoint.BugNoGenerationCheck, func(t *testing.T, planted bool) {
		fm := startFaultMesh(t, 2)
		ctx := context.Background()
		c1 := newClient(t, client.Config{Etcd: fm.etcd})
		c2 := newClient(t, client.Config{Etcd: fm.etcd})
		obj := fmt.Sprintf("actor/list/gen%v", planted)
		fill(t, c1, obj, "a", "b")
		if _, err := c2.Call(ctx, obj, "read"); err != nil { // c2 knows generation 1 too
			t.Fatal(err)
		}
		dead := fm.owner(t, obj)
		survivor := fm.other(t, dead)
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := dead.Stop(sctx); err != nil {
			t.Fatal(err)
		}

		r, err := c1.Call(ctx, obj, "append", "c") // recovers the object on the survivor
		switch {
		case !planted && errCode(err) != pb.Code_CODE_STATE_LOST:
			t.Errorf("the call that re-created the object: %v, want STATE_LOST", err)
		case planted && (err != nil || r.Fence.ObjectGeneration != 2 || r.Fence.Owner != survivor.Self()):
			t.Errorf("the call that re-created the object: %+v, %v; want served by %s under object generation 2", r, err, survivor.Self())
		}

		r, err = c2.Call(ctx, obj, "read") // knew generation 1
		if !planted {
			if errCode(err) != pb.Code_CODE_STATE_LOST {
				t.Errorf("a caller that knew generation 1: %v, want STATE_LOST", err)
			}
		} else {
			var got struct{ Items []string }
			if err != nil || json.Unmarshal(r.Payload, &got) != nil || !slices.Equal(got.Items, []string{"c"}) {
				t.Errorf("a caller that knew generation 1: %+v, %v; want served the re-created state [c] silently", r, err)
			}
		}

		newer := &pb.Fence{OwnerId: "n2", OwnerGeneration: 9, ObjectGeneration: 2, AuthorityGeneration: 1}
		older := &pb.Fence{OwnerId: "n1", OwnerGeneration: 7, ObjectGeneration: 1, AuthorityGeneration: 4}
		if !survivor.AcceptFence("actor/list/fence", newer) {
			t.Fatal("gateway refused a first fence")
		}
		if got := survivor.AcceptFence("actor/list/fence", older); got != planted {
			t.Errorf("gateway accepted an older fence: %v, want %v", got, planted)
		}
	})
}

// ---------------------------------------------------------------- dedup-not-transferred

// Trigger: a reply lost after execution (node.before-reply=error: the caller
// gets UNAVAILABLE), the object moves, the caller retries with the same
// operation id. Correct: the target answers from the moved de-duplication
// table. Planted: the table stayed behind and the append runs again.
func TestPlantedDedupNotTransferred(t *testing.T) {
	bothWays(t, failpoint.BugDedupNotTransferred, func(t *testing.T, planted bool) {
		fm := startFaultMesh(t, 2)
		ctx := context.Background()
		c := newClient(t, client.Config{Etcd: fm.etcd})
		obj := fmt.Sprintf("actor/list/dedup%v", planted)
		fill(t, c, obj, "a")
		src := fm.owner(t, obj)
		dst := fm.other(t, src)

		arm(t, failpoint.NodeBeforeReply, "error@1")
		op := wire.NewOperationID()
		if _, err := directCall(ctx, t, src, op, obj, "append", "once"); status.Code(err) != codes.Unavailable {
			t.Fatalf("append with its reply lost: %v, want a gRPC UNAVAILABLE error", err)
		}
		st := waitRelocation(t, relocateAsync(src, obj, node.RelocateOptions{Target: dst.Self().ID}), 30*time.Second)
		wantOutcome(t, st, "completed", pb.Code_CODE_OK)

		again, err := c.CallOp(ctx, op, obj, "append", [][]byte{[]byte("once")})
		if err != nil {
			t.Fatal(err)
		}
		items := readItems(t, c, obj)
		if !planted && (!again.Replayed || !slices.Equal(items, []string{"a", "once"})) {
			t.Errorf("retry after the move: replayed=%v, items %q; want answered from the moved table, [a once]", again.Replayed, items)
		}
		if planted && (again.Replayed || !slices.Equal(items, []string{"a", "once", "once"})) {
			t.Errorf("retry after the move: replayed=%v, items %q; want executed a second time", again.Replayed, items)
		}
	})
}

// ---------------------------------------------------------------- commit-without-compare

// Trigger: the target waits before its commit past the relocation deadline
// (target.before-commit=sleep). The source preserves at its deadline,
// reopens and acknowledges a write. Correct: the late commit fails on the
// record the preserve rewrote. Planted: it lands over the preserved record:
// the acknowledged write is lost, and the source serves the object as a
// second owner until its cache shows the commit (then, an owner that
// notices, it fences and drops its copy).
func TestPlantedCommitWithoutCompare(t *testing.T) {
	bothWays(t, failpoint.BugCommitWithoutCompare, func(t *testing.T, planted bool) {
		fm := startFaultMesh(t, 2)
		ctx := context.Background()
		c := newClient(t, client.Config{Etcd: fm.etcd})
		obj := fmt.Sprintf("actor/list/nocompare%v", planted)
		fill(t, c, obj, "a", "b")
		src := fm.owner(t, obj)
		dst := fm.other(t, src)
		arm(t, failpoint.TargetBeforeCommit, "sleep:2s@1")

		st := waitRelocation(t, relocateAsync(src, obj, node.RelocateOptions{Target: dst.Self().ID, Timeout: 800 * time.Millisecond}), 10*time.Second)
		wantOutcome(t, st, "aborted", pb.Code_CODE_DEADLINE_EXCEEDED)
		r, err := c.Call(ctx, obj, "append", "after-preserve")
		if err != nil || r.Fence.Owner != src.Self() {
			t.Fatalf("append after the preserve: %+v, %v; want acknowledged by the source", r, err)
		}

		ta := targetAttempt(t, dst, obj, 10*time.Second)
		rec := fm.record(t, obj).Record
		if !planted {
			if ta.GetOutcome() != "failed" || ta.GetCode() != pb.Code_CODE_STALE_FENCE || rec.Owner != src.Self() {
				t.Errorf("late commit: %s %v (%s), record owned by %s; want refused, the source's", ta.GetOutcome(), ta.GetCode(), ta.GetMessage(), rec.Owner)
			}
			if items := readItems(t, c, obj); !slices.Equal(items, []string{"a", "b", "after-preserve"}) {
				t.Errorf("items %q", items)
			}
			hostsNothing(t, dst)
			return
		}
		if ta.GetOutcome() != "completed" || rec.Owner != dst.Self() {
			t.Fatalf("late commit: %s %v (%s), record owned by %s; want it landed over the preserved record", ta.GetOutcome(), ta.GetCode(), ta.GetMessage(), rec.Owner)
		}
		for deadline := time.Now().Add(10 * time.Second); src.Hosted() != 0 || dst.Hosted() != 1; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("hosted: source %d, target %d; want the source to notice the commit and drop its copy", src.Hosted(), dst.Hosted())
			}
		}
		fresh := newClient(t, client.Config{Etcd: fm.etcd})
		if items := readItems(t, fresh, obj); !slices.Equal(items, []string{"a", "b"}) {
			t.Errorf("items %q, want [a b]: the write the source acknowledged after its preserve is lost", items)
		}
	})
}

// ---------------------------------------------------------------- lease-receive-time

// Trigger: the node's etcd replies delayed by more than the margin (here
// 550 ms, margin 400 ms, TTL 2 s), then the node cut off from etcd. The pure
// check is pkg/lease TestDeadlineNeverPastExpiry; this one watches a real
// keeper. A keep-alive whose reply was processed at r was received by etcd
// before r − delay, so etcd expires the lease before r − delay + TTL.
// Correct: every deadline is at most r + TTL − margin − delay (before that).
// Planted: the deadline is r + TTL − margin, past etcd's expiry: cut off
// then, the node would serve on after etcd let its lease go.
func TestPlantedLeaseReceiveTime(t *testing.T) {
	bothWays(t, failpoint.BugLeaseReceiveTime, func(t *testing.T, planted bool) {
		const delay = 550 * time.Millisecond
		fm := startFaultMesh(t, 0)
		p := etcdProxy(t, fm)
		n := fm.add(t, "n1", viaProxy(p))
		heal(t, p)
		ttl := 2 * time.Second
		margin := ttl / 5 // lease.Config default

		p.SetDelays(0, delay)
		time.Sleep(200 * time.Millisecond)
		// Each time the deadline moves, how far it lies past the instant the
		// move was seen (≥ the reply's processing).
		var ahead []time.Duration
		last := n.Keeper().Deadline()
		for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
			d := n.Keeper().Deadline()
			if !d.Equal(last) {
				ahead = append(ahead, d.Sub(time.Now()))
				last = d
			}
		}
		if err := n.Keeper().Err(); err != nil || len(ahead) < 3 {
			t.Fatalf("keeper: %v, %d confirmations seen", err, len(ahead))
		}
		best := slices.Max(ahead)
		t.Logf("deadline ahead of the confirmation by %v (etcd's expiry at most %v ahead)", ahead, ttl-delay)
		if !planted && best > ttl-margin-delay {
			t.Errorf("a deadline %v after its confirmation: more than TTL − margin − reply delay (%v): it may lie past etcd's expiry", best, ttl-margin-delay)
		}
		if planted && best <= ttl-delay {
			t.Errorf("planted: deadlines at most %v after their confirmation, never past etcd's expiry (%v)", best, ttl-delay)
		}
	})
}

// ---------------------------------------------------------------- crc-ignored

// Trigger: a corrupted STATE chunk (source.chunk-data=corrupt@1; the suite
// uses corrupt%2). Corrupt flips the low bit of the last digit: the last
// element of the list, c1-39, becomes c1-38, and the state still decodes.
// (The middle byte, flipped before, lies in the envelope's de-duplication
// table for such objects: refused, or a silent change nobody reads.)
// Correct: DATA_LOST, the source keeps the object intact. Planted: the
// relocation completes and the target serves a duplicated element and has
// lost an acknowledged one.
func TestPlantedCRCIgnored(t *testing.T) {
	bothWays(t, failpoint.BugCRCIgnored, func(t *testing.T, planted bool) {
		fm := startFaultMesh(t, 2)
		c := newClient(t, client.Config{Etcd: fm.etcd})
		obj := fmt.Sprintf("actor/list/crc%v", planted)
		var written []string
		for i := range 40 {
			written = append(written, fmt.Sprintf("c1-%d", i))
		}
		fill(t, c, obj, written...)
		src := fm.owner(t, obj)
		dst := fm.other(t, src)
		arm(t, failpoint.SourceChunkData, "corrupt@1")

		st := waitRelocation(t, relocateAsync(src, obj, node.RelocateOptions{Target: dst.Self().ID}), 30*time.Second)
		items := readItems(t, c, obj)
		if !planted {
			wantOutcome(t, st, "aborted", pb.Code_CODE_DATA_LOST)
			fm.serves(t, src, c, obj)
			if !slices.Equal(items, written) {
				t.Errorf("state changed by a refused relocation: %q", items)
			}
			return
		}
		wantOutcome(t, st, "completed", pb.Code_CODE_OK)
		fm.serves(t, dst, c, obj)
		want := append(slices.Clone(written[:39]), "c1-38")
		if !slices.Equal(items, want) {
			t.Errorf("installed %q, want the corrupted state %q (c1-39 lost, c1-38 twice)", items, want)
		}
	})
}

// ---------------------------------------------------------------- woken-owner-serves

// Trigger: an owner paused past its TTL (SIGSTOP), then woken (SIGCONT). A
// pause cannot be done in process; cutting the node off from etcd does the
// same to its lease: the keeper's local deadline passes unconfirmed and the
// keeper fences, while callers can still reach the node. Correct: it drops
// its objects and serves nothing. Planted: it keeps them and serves them
// under its old fence, also after etcd expired its lease and another node
// re-created the object: two owners. (cmd/meshnode, which exits when the
// lease ends, is planted too: it serves on.)
func TestPlantedWokenOwnerServes(t *testing.T) {
	bothWays(t, failpoint.BugWokenOwnerServes, func(t *testing.T, planted bool) {
		fm := startFaultMesh(t, 0)
		ctx := context.Background()
		p := etcdProxy(t, fm)
		old := fm.add(t, "n1", viaProxy(p))
		heal(t, p)
		c := newClient(t, client.Config{Etcd: fm.etcd})
		obj := fmt.Sprintf("actor/list/woken%v", planted)
		fill(t, c, obj, "a") // the only node: placed on old
		fm.add(t, "n2")

		p.SetMode(tcpproxy.Blackhole)
		deadline := time.Now().Add(5 * time.Second)
		for old.Keeper().Err() == nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if old.Keeper().Err() == nil {
			t.Fatal("the cut-off node's keeper did not fence itself")
		}
		time.Sleep(100 * time.Millisecond) // its teardown (watchFence)

		staleCall := func(v string) (*pb.CallReply, error) {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			return directCall(cctx, t, old, wire.NewOperationID(), obj, "append", v)
		}
		if h := old.Hosted(); (h == 0) == planted {
			t.Errorf("the fenced owner hosts %d objects (planted %v)", h, planted)
		}
		r, err := staleCall("stale1")
		if !planted {
			if err == nil && r.GetCode() == pb.Code_CODE_OK {
				t.Errorf("a fenced owner served: %v", r)
			}
			return
		}
		if err != nil || r.GetCode() != pb.Code_CODE_OK || r.GetFence().GetOwnerId() != "n1" {
			t.Fatalf("planted: the fenced owner answered %v, %v; want it served under its old fence", r, err)
		}
		// etcd lets the lease go; the next routed call re-creates the object
		// on n2 (its state is lost), while the old owner still serves it.
		var rerr error
		for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if _, rerr = c.Call(ctx, obj, "read"); errCode(rerr) == pb.Code_CODE_STATE_LOST {
				break
			}
		}
		if errCode(rerr) != pb.Code_CODE_STATE_LOST {
			t.Fatalf("no recovery elsewhere: %v", rerr)
		}
		if r, err := staleCall("stale2"); err != nil || r.GetCode() != pb.Code_CODE_OK {
			t.Errorf("planted: after the recovery elsewhere the old owner answered %v, %v; want it still serving", r, err)
		}
		if rec := fm.record(t, obj).Record; rec.Owner.ID != "n2" || rec.ObjectGeneration != 2 {
			t.Errorf("record %+v, want re-created on n2", rec)
		}
	})
}

// ---------------------------------------------------------------- node.before-reply

// The failpoint node.before-reply (R8: a pause between execute and reply):
// "error" loses the reply of an executed request (the caller gets a gRPC
// UNAVAILABLE error; its retry with the same operation id is answered from
// the de-duplication table); "sleep" holds only that reply, not the
// object's mailbox.
func TestFaultNodeBeforeReply(t *testing.T) {
	fm := startFaultMesh(t, 1)
	ctx := context.Background()
	n := fm.nodes[0]
	const obj = "actor/list/beforereply"
	arm(t, failpoint.NodeBeforeReply, "error@1")
	op := wire.NewOperationID()
	if _, err := directCall(ctx, t, n, op, obj, "append", "x"); status.Code(err) != codes.Unavailable {
		t.Fatalf("reply lost: %v, want a gRPC UNAVAILABLE error", err)
	}
	r, err := directCall(ctx, t, n, op, obj, "append", "x")
	if err != nil || r.GetCode() != pb.Code_CODE_OK || !r.GetReplayed() {
		t.Fatalf("retry: %v, %v; want answered from the de-duplication table", r, err)
	}

	failpoint.Reset()
	arm(t, failpoint.NodeBeforeReply, "sleep:1500ms@1")
	var wg sync.WaitGroup
	var slow time.Duration
	start := time.Now()
	wg.Go(func() {
		if _, err := directCall(ctx, t, n, wire.NewOperationID(), obj, "append", "y"); err != nil {
			t.Error(err)
		}
		slow = time.Since(start)
	})
	time.Sleep(200 * time.Millisecond)
	t0 := time.Now()
	r, err = directCall(ctx, t, n, wire.NewOperationID(), obj, "append", "z")
	fast := time.Since(t0)
	wg.Wait()
	if err != nil || r.GetCode() != pb.Code_CODE_OK || string(r.GetPayload()) != `{"length":3}` {
		t.Fatalf("second append: %v, %v", r, err)
	}
	if fast > 700*time.Millisecond || slow < 1400*time.Millisecond {
		t.Errorf("second append answered after %v, the paused one after %v: the pause must hold only its own reply", fast, slow)
	}
}

// ---------------------------------------------------------------- bulk-commit-ignores-compare

// A bulk move of two objects whose first commit waits past the relocation
// deadline: its source preserves that object and serves it again (aborted),
// the other moves. Correct, the late commit fails its own compare and the
// record stays the source's; planted, it lands over the preserved record:
// the source reported the relocation aborted, yet etcd names the target,
// and the write the source acknowledged after its preserve is lost.
func TestPlantedBulkCommitIgnoresCompare(t *testing.T) {
	bothWays(t, failpoint.BugBulkCommitIgnoresCompare, func(t *testing.T, planted bool) {
		fm := startFaultMesh(t, 2)
		ctx := context.Background()
		c := newClient(t, client.Config{Etcd: fm.etcd})
		objs := []string{fmt.Sprintf("actor/list/bulk%va", planted), fmt.Sprintf("actor/list/bulk%vb", planted)}
		fill(t, c, objs[0], "a")
		src := fm.owner(t, objs[0])
		fill(t, c, objs[1], "a")
		if o := fm.owner(t, objs[1]); o != src { // both on one node
			if st, err := o.Relocate(ctx, objs[1], node.RelocateOptions{Target: src.Self().ID, Foreground: true}); err != nil || st.GetOutcome() != "completed" {
				t.Fatal(st, err)
			}
		}
		dst := fm.other(t, src)
		arm(t, failpoint.TargetBeforeCommit, "sleep:2s@1")
		outs, err := src.RelocateMany(ctx, objs, node.RelocateOptions{Target: dst.Self().ID, Timeout: 800 * time.Millisecond, Foreground: true})
		if err != nil {
			t.Fatal(err)
		}
		late := ""
		for _, o := range outs {
			switch o.Outcome {
			case "aborted":
				late = o.Object
			case "completed":
			default:
				t.Fatalf("%s: %+v", o.Object, o)
			}
		}
		if late == "" {
			t.Fatalf("no relocation of the bulk was aborted: %+v", outs)
		}
		r, err := c.Call(ctx, late, "append", "after-preserve")
		if err != nil || r.Fence.Owner != src.Self() {
			t.Fatalf("append after the preserve: %+v, %v; want acknowledged by the source", r, err)
		}
		time.Sleep(2500 * time.Millisecond) // the late commit has run by now
		rec := fm.record(t, late).Record
		if !planted {
			if rec.Owner != src.Self() {
				t.Errorf("late commit of %s landed: the record names %s", late, rec.Owner)
			}
			if items := readItems(t, c, late); !slices.Equal(items, []string{"a", "after-preserve"}) {
				t.Errorf("items %q", items)
			}
			return
		}
		if rec.Owner != dst.Self() {
			t.Fatalf("late commit of %s: the record names %s; want it landed over the preserved record", late, rec.Owner)
		}
		for deadline := time.Now().Add(10 * time.Second); src.Hosted() != 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the source hosts %d; want it to notice the commit and drop its copy", src.Hosted())
			}
		}
		fresh := newClient(t, client.Config{Etcd: fm.etcd})
		if items := readItems(t, fresh, late); !slices.Equal(items, []string{"a"}) {
			t.Errorf("items %q, want [a]: the write the source acknowledged after its preserve is lost", items)
		}
	})
}
