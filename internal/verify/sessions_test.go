package verify

import (
	"testing"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

const room0 = "actor/room/r0"

type said struct {
	N uint64 `json:"n"`
}

// sessionsCase: two sessions on room0 from 5 ms; three says acknowledged
// (n 1..3), one of unknown outcome that ran (n 4); both sessions waited
// for message 3 at the end. mutate changes what they received.
func sessionsCase(mutate func(a, b *[]received)) (*Sessions, *hist) {
	b := newHist()
	b.ok(1, "sessions", room0, "say", []string{"c1/1"}, said{1}, 10, 12, g11)
	b.ok(2, "sessions", room0, "say", []string{"c2/1"}, said{2}, 11, 14, g11)
	b.unknown(1, "sessions", room0, "say", []string{"c1/2"}, 15)
	b.ok(2, "sessions", room0, "say", []string{"c2/2"}, said{3}, 16, 18, g11)
	b.final(9, "sessions", room0, "history", struct{ Messages []received }{[]received{{N: 1, Text: "c1/1"}, {N: 2, Text: "c2/1"}, {N: 3, Text: "c2/2"}, {N: 4, Text: "c1/2"}}}, 30, 31, g11)
	all := []received{{N: 1, Text: "c1/1"}, {N: 2, Text: "c2/1"}, {N: 3, Text: "c2/2"}, {N: 4, Text: "c1/2"}}
	x, y := append([]received(nil), all...), append([]received(nil), all...)
	if mutate != nil {
		mutate(&x, &y)
	}
	w := &Sessions{}
	for i, ps := range [][]received{x, y} {
		w.logs = append(w.logs, &sessionLog{idx: i, stream: i + 1, room: room0, openAt: ms(5), gen: 1, pushes: ps, target: 3,
			gateways: map[string]bool{"n1": true}})
	}
	return w, b
}

func TestSessionsCorrect(t *testing.T) {
	w, b := sessionsCase(nil)
	r := w.Check(b.h, b.finalState(nil))
	wantClean(t, r)
	if r.Acked != 3 || r.Figures["sessions"] != 2 || r.Figures["pushes"] != 8 {
		t.Fatalf("acked %d, figures %v", r.Acked, r.Figures)
	}
}

func TestSessionsLostPush(t *testing.T) {
	w, b := sessionsCase(func(a, _ *[]received) { *a = (*a)[:2] })
	r := w.Check(b.h, b.finalState(nil))
	wantViolation(t, r.Violations, "session-lost-push")
	if r.Lost != 1 {
		t.Fatalf("lost %d, want 1", r.Lost)
	}
}

func TestSessionsGapAndRepeat(t *testing.T) {
	w, b := sessionsCase(func(a, b *[]received) {
		*a = append((*a)[:1], (*a)[2:]...)            // 1, 3, 4
		*b = append(*b, received{N: 4, Text: "c1/2"}) // 4 twice
	})
	r := w.Check(b.h, b.finalState(nil))
	wantViolation(t, r.Violations, "session-order")
	if len(r.Violations) < 3 { // the gap, the repeat, and the lost message 2
		t.Fatalf("violations:\n%s", violations(r.Violations))
	}
}

func TestSessionsExecutedTwiceOrDiverged(t *testing.T) {
	w, b := sessionsCase(func(a, _ *[]received) { *a = append(*a, received{N: 5, Text: "c2/2"}) })
	r := w.Check(b.h, b.finalState(nil))
	wantViolation(t, r.Violations, "session-duplicated")
	if r.Duplicated == 0 {
		t.Fatal("duplicated 0")
	}
	w, b = sessionsCase(func(_, b *[]received) { (*b)[1].Text = "c1/2" })
	r = w.Check(b.h, b.finalState(nil))
	wantViolation(t, r.Violations, "session-diverged")

	w, b = sessionsCase(func(a, _ *[]received) { *a = append(*a, received{N: 5, Text: "nobody said this"}) })
	r = w.Check(b.h, b.finalState(nil))
	wantViolation(t, r.Violations, "session-unexpected")
}

// A session whose room's state was lost ends; its missing pushes are not
// losses. Any other end is a violation.
func TestSessionsEnds(t *testing.T) {
	w, b := sessionsCase(func(a, _ *[]received) { *a = (*a)[:1] })
	w.logs[0].endAt, w.logs[0].endCode = ms(20), pb.Code_CODE_STATE_LOST
	r := w.Check(b.h, b.finalState(nil))
	wantClean(t, r)
	if r.Figures["ended-state-lost"] != 1 {
		t.Fatalf("figures %v", r.Figures)
	}
	w.logs[0].endCode = pb.Code_CODE_UNAVAILABLE
	r = w.Check(b.h, b.finalState(nil))
	wantViolation(t, r.Violations, "session-ended")

	r = (&Sessions{}).Check(b.h, b.finalState(nil))
	wantViolation(t, r.Violations, "setup")
}
