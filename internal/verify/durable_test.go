package verify

import (
	"testing"
)

// A durable list's owner crashed: the object was recovered under object
// generation 2 with its state. No StateLost is declared and none is
// needed: every acknowledged append of generation 1 must be in the final
// read; one missing is a silent loss.
func TestDurableListRecovered(t *testing.T) {
	const obj = "actor/dlist/l0"
	g1, g2 := fence("n1", 1, 1), fence("n2", 2, 2)
	build := func(final []string) *hist {
		b := newHist()
		b.ok(1, "dlist", obj, "append", []string{"a"}, listAppendReply{1}, 0, 10, g1)
		b.ok(1, "dlist", obj, "append", []string{"b"}, listAppendReply{2}, 20, 30, g1)
		b.ok(2, "dlist", obj, "append", []string{"c"}, listAppendReply{3}, 40, 50, g2)
		b.final(3, "dlist", obj, "read", listReadReply{Items: final}, 60, 61, g2)
		return b
	}
	w := &List{Type: "dlist", Prefix: "", N: 1}
	if w.Name() != "dlist" || w.Objects()[0] != obj {
		t.Fatalf("workload %s on %v", w.Name(), w.Objects())
	}
	b := build([]string{"a", "b", "c"})
	wantClean(t, w.Check(b.h, b.finalState(nil)))
	if c := CheckFences(b.h, nil); c.Undeclared != 0 {
		t.Fatalf("a durable object's recovery counted as an undeclared loss:\n%s", violations(c.Violations))
	}
	b = build([]string{"a", "c"})
	r := w.Check(b.h, b.finalState(nil))
	wantViolation(t, r.Violations, "silent-loss")
	if r.Lost != 1 || r.DeclaredLost != 0 {
		t.Fatalf("lost %d declared %d, want 1 and 0", r.Lost, r.DeclaredLost)
	}
	// The same history on a memory list: the superseded generation needed a
	// StateLost reply.
	m := newHist()
	m.ok(1, "list", "actor/list/l0", "append", []string{"a"}, listAppendReply{1}, 0, 10, g1)
	m.ok(2, "list", "actor/list/l0", "append", []string{"c"}, listAppendReply{1}, 40, 50, g2)
	if c := CheckFences(m.h, nil); c.Undeclared != 1 {
		t.Fatalf("memory list: undeclared %d, want 1", c.Undeclared)
	}
	if (&Bank{Type: "dbank", N: 1}).Name() != "dbank" || (&Bank{}).Name() != "bank" {
		t.Fatal("bank workload names")
	}
}
