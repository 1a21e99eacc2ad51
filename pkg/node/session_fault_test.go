//go:build failpoints

package node_test

// The reference runtime's session bugs 16, 21 and 32 at the level of the
// node (the pure gateway's side is pkg/session/seedbug_test.go).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/session"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// sessionOn opens a session on room at gateway gw (the only node its
// client knows) and says one message, so that the room exists; it returns
// the session and the room's owner.
func (fm *faultMesh) sessionOn(t *testing.T, gw *node.Node, room string) (*client.Session, *node.Node) {
	t.Helper()
	c := newClient(t, client.Config{Nodes: []string{gw.Address()}})
	s, err := c.OpenSession(context.Background(), room)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	say(t, s, "hello")
	return s, fm.owner(t, room)
}

// sessionOff opens a session on room at the mesh's first node (the
// gateway) and moves the room off it if it lives there: the gateway is
// then neither the source nor the target of the next move. It returns the
// session, the room's owner and a third node.
func (fm *faultMesh) sessionOff(t *testing.T, room string) (s *client.Session, owner, target *node.Node) {
	t.Helper()
	gw := fm.nodes[0]
	s, owner = fm.sessionOn(t, gw, room)
	if owner == gw {
		if st, err := owner.Relocate(context.Background(), room, node.RelocateOptions{Target: fm.nodes[1].Self().ID}); err != nil || st.GetOutcome() != "completed" {
			t.Fatalf("relocate: %v %v", st, err)
		}
		owner = fm.nodes[1]
	}
	return s, owner, fm.other(t, gw, owner)
}

// 16: the target never routes the session to itself after the commit (the
// route is lost). The gateway's seal times out; it binds again through
// etcd, finds the new owner and sends it the calls it kept: nothing lost,
// nothing twice, pushes in order.
func TestSeedBug16_LostRouteBindsAgain(t *testing.T) {
	fm := startFaultMesh(t, 3)
	const room = "actor/room/lostroute"
	s, owner, target := fm.sessionOff(t, room)
	ctx := context.Background()
	arm(t, failpoint.SessionBeforeRoute, "error")
	if st, err := owner.Relocate(ctx, room, node.RelocateOptions{Target: target.Self().ID}); err != nil || st.GetOutcome() != "completed" {
		t.Fatalf("relocate: %v %v", st, err)
	}
	waitFor(t, 5*time.Second, "the target's lost route", func() bool {
		return fm.metricSum(t, target, "meshloc_session_routes_total", map[string]string{"code": "unavailable"}) == 1
	})
	failpoint.Reset()
	var want []uint64
	for i := range 5 {
		want = append(want, say(t, s, fmt.Sprintf("after%d", i)))
	}
	if fmt.Sprint(want) != "[2 3 4 5 6]" {
		t.Fatalf("say numbers after the lost route %v", want)
	}
	if got := recvN(t, s, 6); fmt.Sprint(got) != "[1 2 3 4 5 6]" {
		t.Fatalf("pushes %v", got)
	}
	if got := fm.metricSum(t, target, "meshloc_session_binds_total", nil); got < 1 {
		t.Errorf("binds at the target %v: the gateway never bound again", got)
	}
}

// 21: a seal (or route) for a session its gateway does not hold (it ended,
// or the gateway restarted) is UNAVAILABLE, not a protocol error of the
// sender's; a ref naming another gateway is STALE_FENCE.
func TestSeedBug21_NoSuchSessionIsUnavailable(t *testing.T) {
	fm := startFaultMesh(t, 1)
	n := fm.nodes[0]
	peer := rpcpb.NewPeerServiceClient(dial(t, n))
	ref := session.Ref{Session: session.NewID(), Gateway: n.Self().ID, Generation: n.Self().Generation,
		RoutingID: fm.routingID(t, n), Address: n.Address(), Binding: 1}
	fence := &pb.Fence{OwnerId: "other", OwnerGeneration: 1, ObjectGeneration: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rid := make([]byte, 16)
	rid[0] = 1
	seal := func(r session.Ref) pb.Code {
		rep, err := peer.SessionSeal(ctx, &pb.SessionSealRequest{RelocationId: rid, Object: "actor/room/x", Fence: fence,
			Session: r.Proto(), TargetId: "t", TargetGeneration: 1})
		if err != nil {
			t.Fatal(err)
		}
		return rep.GetCode()
	}
	if code := seal(ref); code != pb.Code_CODE_UNAVAILABLE {
		t.Errorf("seal of an unknown session: %v, want UNAVAILABLE", code)
	}
	route, err := peer.SessionRoute(ctx, &pb.SessionRouteRequest{RelocationId: rid, Object: "actor/room/x", Commit: true,
		Fence: fence, Address: "127.0.0.1:1", Session: ref.Proto()})
	if err != nil || route.GetCode() != pb.Code_CODE_UNAVAILABLE {
		t.Errorf("route of an unknown session: %v %v, want UNAVAILABLE", route.GetCode(), err)
	}
	stale := ref
	stale.Generation++
	if code := seal(stale); code != pb.Code_CODE_STALE_FENCE {
		t.Errorf("seal naming another gateway generation: %v, want STALE_FENCE", code)
	}
}

// 32: the target drains and stops while its route to the session's
// gateway is in flight. The drain moves the room on to the third node
// (whose route reaches the gateway; the late one is stale there), and Stop
// waits for the late route (no goroutine left: goleak checks the package).
// The session goes on, nothing lost.
func TestSeedBug32_StopWaitsForSessionRoutes(t *testing.T) {
	fm := startFaultMesh(t, 3)
	const room = "actor/room/stoproute"
	s, owner, target := fm.sessionOff(t, room)
	ctx := context.Background()
	arm(t, failpoint.SessionBeforeRoute, "sleep:2s")
	if st, err := owner.Relocate(ctx, room, node.RelocateOptions{Target: target.Self().ID}); err != nil || st.GetOutcome() != "completed" {
		t.Fatalf("relocate: %v %v", st, err)
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if rep, err := target.Drain(sctx, node.DrainOptions{}); err != nil || len(rep.Failed) > 0 {
		t.Fatalf("drain: %+v %v", rep, err)
	}
	if err := target.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	if got := fm.metricSum(t, target, "meshloc_session_routes_total", nil); got != 1 {
		t.Errorf("routes sent by the stopped target: %v, want its commit route, sent before Stop returned", got)
	}
	failpoint.Reset()
	if n := say(t, s, "after"); n != 2 {
		t.Fatalf("say after the drain: %d", n)
	}
	if got := recvN(t, s, 2); fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("pushes %v", got)
	}
}

// The seal never reaches the gateway (it stays open, bound to the source)
// and the move aborts: the source binds the session anew and routes it
// back. The gateway takes that abort route from the owner it is bound to,
// or, when its next call meets the newer binding first, binds again there;
// either way the session goes on (before: the source's newer binding read
// as "another gateway holds the session", and the session closed).
func TestSessionSealLostThenAbort(t *testing.T) {
	fm := startFaultMesh(t, 3)
	const room = "actor/room/seallost"
	s, owner, target := fm.sessionOff(t, room)
	ctx := context.Background()
	arm(t, failpoint.SessionBeforeSeal, "error")
	arm(t, failpoint.TargetBeforeCommit, "error")
	if st, err := owner.Relocate(ctx, room, node.RelocateOptions{Target: target.Self().ID}); err != nil || st.GetOutcome() != "aborted" {
		t.Fatalf("relocate: %v %v, want aborted", st, err)
	}
	failpoint.Reset()
	var got []uint64
	for i := range 3 {
		got = append(got, say(t, s, fmt.Sprintf("after%d", i)))
	}
	if fmt.Sprint(got) != "[2 3 4]" {
		t.Fatalf("say numbers after the abort %v", got)
	}
	if p := recvN(t, s, 4); fmt.Sprint(p) != "[1 2 3 4]" {
		t.Fatalf("pushes %v", p)
	}
	if fm.owner(t, room) != owner {
		t.Fatalf("the room moved")
	}
}
