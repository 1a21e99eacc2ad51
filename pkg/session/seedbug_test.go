package session

import (
	"fmt"
	"math/rand/v2"
	"testing"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The reference runtime's session bugs (docs/seed-bugs.md, 16-21 and 32),
// each as the case of this design that could have it. 16, 21 and 32 also
// have node tests (pkg/node).

// 16: the target did not ensure a route to the session owner before its
// commit, so its route never arrived and the session hung. Here a gateway
// whose seal gets no route binds again through etcd after SealTimeoutMs,
// and sends its kept calls to wherever the object is.
func TestSeedBug16_RouteNeverComes(t *testing.T) {
	w := open(t)
	w.want(SealAsked{Token: 1, RelocationID: "r1", From: n1, Binding: 1, TargetID: "n2", TargetGen: 7}, "answer 1 CODE_OK 0")
	w.want(ClientCall{Seq: 1}, "")
	w.want(Tick{NowMs: SealTimeoutMs}, `bind "" received=0 last=0`)
	w.want(BindResult{Code: pb.Code_CODE_OK, Binding: 2, Owner: n2}, "forward 1 to n2 binding 2; ack 0 to n2")
}

// 17: a seal was installed without a route to the target. Here the gateway
// needs none in advance: it takes the commit route from the target the seal
// named, whichever node that is, and forwards there.
func TestSeedBug17_SealNeedsNoRouteToTarget(t *testing.T) {
	w := open(t)
	w.want(SealAsked{Token: 1, RelocationID: "r1", From: n1, Binding: 1, TargetID: "n2", TargetGen: 7}, "answer 1 CODE_OK 0")
	w.want(ClientCall{Seq: 1}, "")
	w.want(RouteAsked{Token: 2, RelocationID: "r1", Commit: true, From: n2, Binding: 2}, "answer 2 CODE_OK 0; forward 1 to n2 binding 2")
}

// 18: a seal replayed after its relocation ended re-sent (re-installed)
// the seal. Here it is answered ALREADY_TERMINAL and changes nothing.
func TestSeedBug18_SealReplayAfterTerminal(t *testing.T) {
	w := open(t)
	w.want(SealAsked{Token: 1, RelocationID: "r1", From: n1, Binding: 1, TargetID: "n2", TargetGen: 7}, "answer 1 CODE_OK 0")
	w.want(RouteAsked{Token: 2, RelocationID: "r1", Commit: true, From: n2, Binding: 2}, "answer 2 CODE_OK 0")
	w.want(SealAsked{Token: 3, RelocationID: "r1", From: n1, Binding: 1, TargetID: "n2", TargetGen: 7}, "answer 3 CODE_ALREADY_TERMINAL 0")
	if w.g.Phase() != Open {
		t.Fatalf("phase %s after the replay", w.g.Phase())
	}
}

// 19: a late or repeated answer after the terminal one threw protocol
// errors. Here a route repeated after it was taken gets the first answer
// again, and a late seal answer cannot exist (a seal is one RPC: its
// answer is the RPC's reply, which the source stops waiting for).
func TestSeedBug19_RepeatedRouteAfterTerminal(t *testing.T) {
	w := open(t)
	w.want(SealAsked{Token: 1, RelocationID: "r1", From: n1, Binding: 1, TargetID: "n2", TargetGen: 7}, "answer 1 CODE_OK 0")
	for i := range 3 {
		w.want(RouteAsked{Token: 2 + i, RelocationID: "r1", Commit: true, From: n2, Binding: 2}, fmt.Sprintf("answer %d CODE_OK 0", 2+i))
	}
}

// 20: an undefined seal answer was encoded and sent. Here every RPC event
// (Delivery, SealAsked, RouteAsked), in any phase, after any history, gets
// exactly one Answer with a defined code: random histories check it.
func TestSeedBug20_EveryRPCGetsOneTypedAnswer(t *testing.T) {
	owners := []Owner{n1, n2, {ID: "n3", Generation: 9, Address: "n3:1", ObjectGeneration: 2}}
	for run := range 2000 {
		r := rand.New(rand.NewPCG(uint64(run), 7))
		g := NewGateway(GatewayConfig{Self: ref(0), Object: "actor/room/r1"})
		g.Start()
		token := 0
		for range 60 {
			o := owners[r.IntN(len(owners))]
			b := uint64(r.IntN(4))
			rel := fmt.Sprintf("r%d", r.IntN(3))
			var ev Event
			rpc := true
			token++
			switch r.IntN(9) {
			case 0:
				ev = Delivery{Token: token, From: o, Binding: b, Pushes: []Push{{Seq: uint64(r.IntN(5) + 1)}}}
			case 1:
				ev = SealAsked{Token: token, RelocationID: rel, From: o, Binding: b, TargetID: owners[r.IntN(3)].ID, TargetGen: owners[r.IntN(3)].Generation}
			case 2:
				ev = RouteAsked{Token: token, RelocationID: rel, Commit: r.IntN(2) == 0, From: o, Binding: b}
			case 3:
				ev, rpc = BindResult{Code: []pb.Code{pb.Code_CODE_OK, pb.Code_CODE_NOT_OWNER, pb.Code_CODE_UNAVAILABLE}[r.IntN(3)], Binding: b, Owner: o, Hint: o.Address}, false
			case 4:
				ev, rpc = ClientCall{Seq: uint64(r.IntN(4) + 1)}, false
			case 5:
				ev, rpc = CallResult{Seq: uint64(r.IntN(4) + 1), Reply: &pb.CallReply{Code: []pb.Code{pb.Code_CODE_OK, pb.Code_CODE_NOT_OWNER}[r.IntN(2)]}}, false
			case 6:
				ev, rpc = Tick{NowMs: int64(r.IntN(20000))}, false
			case 7:
				ev, rpc = ClientAck{Push: uint64(r.IntN(3))}, false
			case 8:
				ev, rpc = AckResult{}, false
			}
			acts, err := g.Step(ev)
			if err != nil {
				t.Fatalf("run %d: %T: %v", run, ev, err)
			}
			answers := 0
			for _, a := range acts {
				if an, ok := a.(Answer); ok {
					answers++
					if an.Token != token || pb.Code_name[int32(an.Code)] == "" || an.Code == pb.Code_CODE_UNSPECIFIED {
						t.Fatalf("run %d: %T answered %+v", run, ev, an)
					}
				}
			}
			if rpc && answers != 1 || !rpc && answers != 0 {
				t.Fatalf("run %d: %T got %d answers", run, ev, answers)
			}
		}
	}
}

// 21: a missing local session owner was a protocol violation. Here a
// gateway not bound (yet, or again) answers a seal Unavailable: the mover
// goes on; the node answers the same for a session it does not hold
// (pkg/node TestSeedBug21_NoSuchSessionIsUnavailable).
func TestSeedBug21_UnboundIsUnavailable(t *testing.T) {
	w := newGW(t, nil)
	w.g.Start()
	w.want(SealAsked{Token: 1, RelocationID: "r1", From: n1, Binding: 1, TargetID: "n2", TargetGen: 7}, "answer 1 CODE_UNAVAILABLE 0")
}
