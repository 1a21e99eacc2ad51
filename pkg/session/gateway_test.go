package session

import (
	"fmt"
	"strings"
	"testing"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

var (
	n1 = Owner{ID: "n1", Generation: 5, Address: "n1:1", ObjectGeneration: 1}
	n2 = Owner{ID: "n2", Generation: 7, Address: "n2:1", ObjectGeneration: 1}
)

// gw drives a Gateway and renders what it does, one line per action.
type gw struct {
	t *testing.T
	g *Gateway
}

func newGW(t *testing.T, resume *Token) *gw {
	return &gw{t: t, g: NewGateway(GatewayConfig{Self: ref(0), Object: "actor/room/r1", Resume: resume})}
}

func (w *gw) step(ev Event) string {
	w.t.Helper()
	acts, err := w.g.Step(ev)
	if err != nil {
		w.t.Fatalf("%T: %v", ev, err)
	}
	return render(acts)
}

func render(acts []Action) string {
	var b []string
	for _, a := range acts {
		switch a := a.(type) {
		case Bind:
			b = append(b, fmt.Sprintf("bind %q received=%d last=%d", a.Address, a.Received, a.LastCall))
		case Forward:
			b = append(b, fmt.Sprintf("forward %d to %s binding %d", a.Call.Seq, a.Owner.ID, a.Binding))
		case SendAck:
			b = append(b, fmt.Sprintf("ack %d to %s", a.Push, a.Owner.ID))
		case ToClient:
			switch f := a.Frame.GetFrame().(type) {
			case *pb.SessionServerFrame_Opened:
				b = append(b, fmt.Sprintf("client: opened last=%d", f.Opened.GetLastCall()))
			case *pb.SessionServerFrame_Reply:
				b = append(b, fmt.Sprintf("client: reply %d %s", f.Reply.GetSeq(), f.Reply.GetReply().GetCode()))
			case *pb.SessionServerFrame_Push:
				b = append(b, fmt.Sprintf("client: push %d", f.Push.GetSeq()))
			case *pb.SessionServerFrame_Closed:
				b = append(b, fmt.Sprintf("client: closed %s resumable=%v", f.Closed.GetCode(), f.Closed.GetResumable()))
			}
		case Answer:
			b = append(b, fmt.Sprintf("answer %d %s %d", a.Token, a.Code, a.Value))
		case Close:
			b = append(b, fmt.Sprintf("close %s", a.Code))
		}
	}
	return strings.Join(b, "; ")
}

func (w *gw) want(ev Event, want string) {
	w.t.Helper()
	if got := w.step(ev); got != want {
		w.t.Errorf("%T %+v:\n got %s\nwant %s", ev, ev, got, want)
	}
}

func ok(seq uint64) CallResult {
	return CallResult{Seq: seq, Reply: &pb.CallReply{Code: pb.Code_CODE_OK}}
}

func open(t *testing.T) *gw {
	w := newGW(t, nil)
	if got := render(w.g.Start()); got != `bind "" received=0 last=0` {
		t.Fatalf("start: %s", got)
	}
	// The owner hears the gateway holds its binding: it delivers then.
	w.want(BindResult{Code: pb.Code_CODE_OK, Binding: 1, Owner: n1}, "client: opened last=0; ack 0 to n1")
	w.want(AckResult{Binding: 1}, "")
	return w
}

// Calls go one at a time, in order; pushes reach the client in order, once.
func TestGatewayCallsAndPushes(t *testing.T) {
	w := open(t)
	w.want(ClientCall{Seq: 1}, "forward 1 to n1 binding 1")
	w.want(ClientCall{Seq: 2}, "")
	w.want(ok(1), "client: reply 1 CODE_OK; forward 2 to n1 binding 1")
	w.want(ok(2), "client: reply 2 CODE_OK")
	w.want(ClientCall{Seq: 4}, "client: closed CODE_PROTOCOL_ERROR resumable=false; close CODE_PROTOCOL_ERROR")

	w = open(t)
	w.want(Delivery{Token: 1, From: n1, Binding: 1, Pushes: []Push{{Seq: 1}, {Seq: 2}}}, "client: push 1; client: push 2; answer 1 CODE_OK 2")
	w.want(Delivery{Token: 2, From: n1, Binding: 1, Pushes: []Push{{Seq: 2}, {Seq: 3}}}, "client: push 3; answer 2 CODE_OK 3")
	w.want(Delivery{Token: 3, From: n1, Binding: 1, Pushes: []Push{{Seq: 5}}}, "answer 3 CODE_OK 3") // a gap: sent again from 3
	w.want(Delivery{Token: 4, From: n2, Binding: 1, Pushes: []Push{{Seq: 4}}}, "answer 4 CODE_STALE_FENCE 3")
	w.want(Delivery{Token: 5, From: n1, Binding: 9, Pushes: []Push{{Seq: 4}}}, "answer 5 CODE_STALE_FENCE 3")
	w.want(ClientAck{Push: 2}, "ack 2 to n1")
	w.want(ClientAck{Push: 3}, "")
	w.want(AckResult{}, "ack 3 to n1")
	w.want(ClientAck{Push: 7}, "client: closed CODE_PROTOCOL_ERROR resumable=false; close CODE_PROTOCOL_ERROR")
}

// A move: the seal keeps calls, the target's commit route sends them there.
func TestGatewaySealRoute(t *testing.T) {
	w := open(t)
	w.want(ClientCall{Seq: 1}, "forward 1 to n1 binding 1")
	w.want(SealAsked{Token: 1, RelocationID: "r1", From: n1, Binding: 1, TargetID: "n2", TargetGen: 7}, "answer 1 CODE_OK 1")
	w.want(ClientCall{Seq: 2}, "")
	w.want(ok(1), "client: reply 1 CODE_OK") // executed on the target, relayed: kept order
	// Fences: only the seal's target commits, with a newer binding.
	w.want(RouteAsked{Token: 2, RelocationID: "r1", Commit: true, From: Owner{ID: "n3", Generation: 9}, Binding: 2}, "answer 2 CODE_PERMISSION_DENIED 0")
	w.want(RouteAsked{Token: 3, RelocationID: "r1", Commit: true, From: n2, Binding: 1}, "answer 3 CODE_STALE_FENCE 0")
	w.want(RouteAsked{Token: 4, RelocationID: "r1", Commit: true, From: n2, Binding: 2}, "answer 4 CODE_OK 0; forward 2 to n2 binding 2")
	w.want(RouteAsked{Token: 5, RelocationID: "r1", Commit: true, From: n2, Binding: 2}, "answer 5 CODE_OK 0") // repeated: ignored
	w.want(Delivery{Token: 6, From: n1, Binding: 1}, "answer 6 CODE_STALE_FENCE 0")                            // the old owner
	w.want(Delivery{Token: 7, From: n2, Binding: 2, Pushes: []Push{{Seq: 1}}}, "client: push 1; answer 7 CODE_OK 1")

	// An abort comes from the owner, and reopens it there.
	w = open(t)
	w.want(SealAsked{Token: 1, RelocationID: "r2", From: n1, Binding: 1, TargetID: "n2", TargetGen: 7}, "answer 1 CODE_OK 0")
	w.want(ClientCall{Seq: 1}, "")
	w.want(RouteAsked{Token: 2, RelocationID: "r2", Commit: false, From: n2, Binding: 2}, "answer 2 CODE_PERMISSION_DENIED 0")
	w.want(RouteAsked{Token: 3, RelocationID: "r2", Commit: false, From: n1, Binding: 2}, "answer 3 CODE_OK 0; forward 1 to n1 binding 2")
}

// Seals: only from the owner the session is bound to, at its binding; a
// repeated seal gets the same answer; a seal after its route is never
// installed again (docs/seed-bugs.md bugs 17, 18: a seal replayed after
// the terminal one re-sent it); a gateway that is not bound is unavailable,
// not a protocol error (bug 21).
func TestGatewaySealFences(t *testing.T) {
	w := newGW(t, nil)
	w.g.Start()
	w.want(SealAsked{Token: 1, RelocationID: "r1", From: n1, Binding: 1, TargetID: "n2", TargetGen: 7}, "answer 1 CODE_UNAVAILABLE 0")
	w.want(BindResult{Code: pb.Code_CODE_OK, Binding: 1, Owner: n1}, "client: opened last=0; ack 0 to n1")
	w.want(SealAsked{Token: 2, RelocationID: "r1", From: n2, Binding: 1, TargetID: "n2", TargetGen: 7}, "answer 2 CODE_STALE_FENCE 0")
	w.want(SealAsked{Token: 3, RelocationID: "r1", From: n1, Binding: 3, TargetID: "n2", TargetGen: 7}, "answer 3 CODE_STALE_FENCE 0")
	w.want(SealAsked{Token: 4, RelocationID: "r1", From: n1, Binding: 1, TargetID: "n2", TargetGen: 7}, "answer 4 CODE_OK 0")
	w.want(SealAsked{Token: 5, RelocationID: "r1", From: n1, Binding: 1, TargetID: "n2", TargetGen: 7}, "answer 5 CODE_OK 0")
	w.want(SealAsked{Token: 6, RelocationID: "rX", From: n1, Binding: 1, TargetID: "n2", TargetGen: 7}, "answer 6 CODE_CONFLICT 0")
	w.want(RouteAsked{Token: 7, RelocationID: "r1", Commit: true, From: n2, Binding: 2}, "answer 7 CODE_OK 0")
	w.want(SealAsked{Token: 8, RelocationID: "r1", From: n1, Binding: 1, TargetID: "n2", TargetGen: 7}, "answer 8 CODE_ALREADY_TERMINAL 0")
}

// A seal whose route never comes (the target could not reach this gateway,
// docs/seed-bugs.md bug 16): after SealTimeoutMs the gateway binds through
// etcd. A commit route that finds no seal (it was lost) is taken when its
// binding is newer.
func TestGatewayRouteLost(t *testing.T) {
	w := open(t)
	w.want(Tick{NowMs: 1000}, "")
	w.want(SealAsked{Token: 1, RelocationID: "r1", From: n1, Binding: 1, TargetID: "n2", TargetGen: 7}, "answer 1 CODE_OK 0")
	w.want(ClientCall{Seq: 1}, "")
	w.want(Tick{NowMs: 1000 + SealTimeoutMs - 1}, "")
	w.want(Tick{NowMs: 1000 + SealTimeoutMs}, `bind "" received=0 last=0`)
	w.want(BindResult{Code: pb.Code_CODE_OK, Binding: 2, Owner: n2}, "forward 1 to n2 binding 2; ack 0 to n2")

	w = open(t)
	w.want(RouteAsked{Token: 1, RelocationID: "r9", Commit: true, From: n2, Binding: 2}, "answer 1 CODE_OK 0")
	w.want(ClientCall{Seq: 1}, "forward 1 to n2 binding 2")
}

// A seal before the machine's first Tick is timed from the session's start
// (GatewayConfig.NowMs), not from the epoch: the first Tick does not time
// it out at once.
func TestGatewaySealBeforeFirstTick(t *testing.T) {
	const start = 1_700_000_000_000
	w := &gw{t: t, g: NewGateway(GatewayConfig{Self: ref(0), Object: "actor/room/r1", NowMs: start})}
	w.g.Start()
	w.want(BindResult{Code: pb.Code_CODE_OK, Binding: 1, Owner: n1}, "client: opened last=0; ack 0 to n1")
	w.want(SealAsked{Token: 1, RelocationID: "r1", From: n1, Binding: 1, TargetID: "n2", TargetGen: 7}, "answer 1 CODE_OK 0")
	w.want(Tick{NowMs: start + 100}, "")
	w.want(Tick{NowMs: start + SealTimeoutMs}, `bind "" received=0 last=0`)
}

// The owner went away: a call fails, the gateway binds again where the
// object is (the hint), and sends the call again (same operation id).
func TestGatewayRebind(t *testing.T) {
	w := open(t)
	w.want(ClientCall{Seq: 1}, "forward 1 to n1 binding 1")
	w.want(CallResult{Seq: 1, Binding: 1, Reply: &pb.CallReply{Code: pb.Code_CODE_NOT_OWNER, Hint: &pb.Location{Address: "n2:1"}}}, `bind "n2:1" received=0 last=0`)
	w.want(ClientCall{Seq: 2}, "")
	w.want(BindResult{Code: pb.Code_CODE_OK, Binding: 3, Owner: n2}, "forward 1 to n2 binding 3; ack 0 to n2")
	w.want(ok(1), "client: reply 1 CODE_OK; forward 2 to n2 binding 3")
	// Unreachable: binds again every BindRetryMs, then gives up (resumable).
	w.want(CallResult{Seq: 2, Binding: 3, Err: fmt.Errorf("down")}, `bind "" received=0 last=1`)
	for i := range MaxBinds - 1 {
		w.want(BindResult{Err: fmt.Errorf("down")}, "")
		w.want(Tick{NowMs: int64(i+1) * BindRetryMs}, `bind "" received=0 last=1`)
	}
	w.want(BindResult{Err: fmt.Errorf("down")}, "client: closed CODE_UNAVAILABLE resumable=true; close CODE_UNAVAILABLE")
	// Closed: RPCs naming it are answered, nothing else happens.
	w.want(Delivery{Token: 9, From: n2, Binding: 3}, "answer 9 CODE_NOT_FOUND 0")

	// A re-created memory object: the session ends, not resumable.
	w = open(t)
	w.want(ClientCall{Seq: 1}, "forward 1 to n1 binding 1")
	w.want(CallResult{Seq: 1, Binding: 1, Err: fmt.Errorf("down")}, `bind "" received=0 last=0`)
	w.want(BindResult{Code: pb.Code_CODE_STATE_LOST, Message: "generation 2"}, "client: closed CODE_STATE_LOST resumable=false; close CODE_STATE_LOST")
}

// A resumed session starts from its token: calls after its last, pushes
// after what it received.
func TestGatewayResume(t *testing.T) {
	w := newGW(t, &Token{ReceivedPush: 4, LastCall: 2})
	if got := render(w.g.Start()); got != `bind "" received=4 last=2` {
		t.Fatalf("start: %s", got)
	}
	w.want(BindResult{Code: pb.Code_CODE_OK, Binding: 4, Owner: n1, LastCall: 3}, "client: opened last=3; ack 4 to n1")
	w.want(ClientCall{Seq: 3}, "forward 3 to n1 binding 4") // executed already: answered from the table
	w.want(Delivery{Token: 1, From: n1, Binding: 4, Pushes: []Push{{Seq: 4}, {Seq: 5}}}, "client: push 5; answer 1 CODE_OK 5")
	w.want(Stop{}, "client: closed CODE_SHUTTING_DOWN resumable=true; close CODE_SHUTTING_DOWN")

	// Resumed by another process from an older token: calls 3 to 5 ran,
	// their replies went with the process that sent them; it numbers on
	// from 6. Any other number is still a protocol error.
	w = newGW(t, &Token{LastCall: 2, ObjectGeneration: 1})
	w.g.Start()
	w.want(BindResult{Code: pb.Code_CODE_OK, Binding: 4, Owner: n1, LastCall: 5}, "client: opened last=5; ack 0 to n1")
	w.want(ClientCall{Seq: 6}, "forward 6 to n1 binding 4")
	w.want(ClientCall{Seq: 8}, "client: closed CODE_PROTOCOL_ERROR resumable=false; close CODE_PROTOCOL_ERROR")
}

// A resumed token names the object's life: the bind says so, and a bind
// answered STATE_LOST closes the session with the new life's fence.
func TestGatewayResumeKnowsTheLife(t *testing.T) {
	w := newGW(t, &Token{LastCall: 2, ObjectGeneration: 3})
	acts := w.g.Start()
	if b, ok := acts[0].(Bind); !ok || b.KnownObjectGeneration != 3 {
		t.Fatalf("start: %+v", acts)
	}
	acts, _ = w.g.Step(BindResult{Code: pb.Code_CODE_STATE_LOST, Owner: Owner{ID: "n2", Generation: 7, ObjectGeneration: 4, AuthorityGeneration: 9}})
	c := acts[0].(ToClient).Frame.GetClosed()
	if c.GetCode() != pb.Code_CODE_STATE_LOST || c.GetResumable() || c.GetFence().GetObjectGeneration() != 4 || c.GetFence().GetAuthorityGeneration() != 9 {
		t.Fatalf("closed: %v", c)
	}
}

// A route binds the session while a bind of the gateway's is under way.
// The bind's binding, newer, holds (the owner expects it): the call goes
// again under it, and the STALE_FENCE that answers the send under the
// route's binding is an earlier send's, not another gateway's. An older
// bind result changes nothing. A STALE_FENCE for the binding the gateway
// holds is another gateway's: the session ends.
func TestGatewayBindingMovesOn(t *testing.T) {
	stale := func(binding uint64) CallResult {
		return CallResult{Seq: 1, Binding: binding, Reply: &pb.CallReply{Code: pb.Code_CODE_STALE_FENCE}}
	}
	w := open(t)
	w.want(ClientCall{Seq: 1}, "forward 1 to n1 binding 1")
	w.want(CallResult{Seq: 1, Binding: 1, Err: fmt.Errorf("down")}, `bind "" received=0 last=0`)
	w.want(RouteAsked{Token: 1, RelocationID: "r2", Commit: true, From: n2, Binding: 3}, "answer 1 CODE_OK 0; forward 1 to n2 binding 3")
	w.want(BindResult{Code: pb.Code_CODE_OK, Binding: 4, Owner: n2}, "forward 1 to n2 binding 4; ack 0 to n2")
	w.want(stale(3), "")
	w.want(CallResult{Seq: 1, Binding: 4, Reply: &pb.CallReply{Code: pb.Code_CODE_OK}}, "client: reply 1 CODE_OK")

	w = open(t)
	w.want(ClientCall{Seq: 1}, "forward 1 to n1 binding 1")
	w.want(CallResult{Seq: 1, Binding: 1, Err: fmt.Errorf("down")}, `bind "" received=0 last=0`)
	w.want(RouteAsked{Token: 1, RelocationID: "r2", Commit: true, From: n2, Binding: 5}, "answer 1 CODE_OK 0; forward 1 to n2 binding 5")
	w.want(BindResult{Code: pb.Code_CODE_OK, Binding: 4, Owner: n1}, "")
	w.want(stale(5), "client: closed CODE_STALE_FENCE resumable=false; close CODE_STALE_FENCE")
}

// The owner is ahead of this gateway with a binding of the gateway's own:
// an abort route (the seal never reached the gateway) is on its way, or
// was refused. A STALE_FENCE whose hint names the owner means bind again
// there, not "another gateway holds it"; an abort route from the owner the
// session is bound to, with a newer binding and no seal here, rebinds it.
func TestGatewayOwnBindingAhead(t *testing.T) {
	w := open(t)
	w.want(ClientCall{Seq: 1}, "forward 1 to n1 binding 1")
	w.want(CallResult{Seq: 1, Binding: 1, Reply: &pb.CallReply{Code: pb.Code_CODE_STALE_FENCE, Hint: &pb.Location{Address: "n1:1"}}}, `bind "n1:1" received=0 last=0`)
	w.want(BindResult{Code: pb.Code_CODE_OK, Binding: 3, Owner: n1}, "forward 1 to n1 binding 3; ack 0 to n1")
	w.want(RouteAsked{Token: 1, RelocationID: "r1", Commit: false, From: n1, Binding: 2}, "answer 1 CODE_STALE_FENCE 0") // the late route: older
	w.want(ok(1), "client: reply 1 CODE_OK")

	w = open(t)
	w.want(ClientCall{Seq: 1}, "forward 1 to n1 binding 1")
	w.want(RouteAsked{Token: 1, RelocationID: "r1", Commit: false, From: n2, Binding: 2}, "answer 1 CODE_STALE_FENCE 0") // not the owner
	w.want(RouteAsked{Token: 2, RelocationID: "r1", Commit: false, From: n1, Binding: 1}, "answer 2 CODE_STALE_FENCE 0") // not newer
	w.want(RouteAsked{Token: 3, RelocationID: "r1", Commit: false, From: n1, Binding: 2}, "answer 3 CODE_OK 0")
	w.want(CallResult{Seq: 1, Binding: 1, Reply: &pb.CallReply{Code: pb.Code_CODE_STALE_FENCE, Hint: &pb.Location{Address: "n1:1"}}}, "forward 1 to n1 binding 2")
	w.want(CallResult{Seq: 1, Binding: 2, Reply: &pb.CallReply{Code: pb.Code_CODE_OK}}, "client: reply 1 CODE_OK")
}
