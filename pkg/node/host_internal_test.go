package node

import (
	"testing"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// A timer fire that races the seal (the AfterFunc already running when
// capture stops the timer) is not kept as boundary or held work: those are
// sent to the target as requests, and a fire has none (CI once crashed in
// sendBoundary on one). The fire is refused, so the callback clears fireSet
// and reopen can re-arm; requests are still kept in order.
func TestTimerFireDuringSealIsNotKept(t *testing.T) {
	for _, mode := range []hostMode{modeBoundary, modeHold} {
		h := &hosted{mode: mode}
		if h.submit(&work{timer: true}) {
			t.Fatalf("mode %d: a timer fire was accepted", mode)
		}
		req := &work{req: &pb.CallRequest{}}
		if !h.submit(req) {
			t.Fatalf("mode %d: a request was refused", mode)
		}
		kept := append(append([]*work(nil), h.boundary...), h.held...)
		if len(kept) != 1 || kept[0] != req {
			t.Fatalf("mode %d: kept %v, want only the request", mode, kept)
		}
	}
	// A hidden target keeps a fire: it runs after admission, as a tick.
	h := &hosted{mode: modeHidden}
	if !h.submit(&work{timer: true}) || len(h.waiting) != 1 {
		t.Fatal("hidden: a timer fire was not kept for admission")
	}
}
