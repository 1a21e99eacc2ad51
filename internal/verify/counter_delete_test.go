package verify

import "testing"

// A durable counter deleted by an acknowledged delete of generation 1
// starts again at 0 under generation 2: values read after it count only
// the adds of generation 2; a reply of generation 1 after the delete
// returned, or a value that still holds the deleted adds, is the deleted
// state coming back.
func TestCounterDeletes(t *testing.T) {
	const obj = "actor/dcounter/l0"
	g1, g2 := fence("n1", 1, 1), fence("n2", 2, 1)
	w := &Counter{Label: "lifecycle", Type: "dcounter", Durable: true, Deletes: true, N: 1}
	if w.Objects()[0] != obj {
		t.Fatalf("objects %v", w.Objects())
	}
	build := func(after func(b *hist), final int64) *hist {
		b := newHist()
		b.ok(1, "lifecycle", obj, "add", []string{"1"}, cval{1}, 0, 10, g1)
		b.ok(1, "lifecycle", obj, "add", []string{"1"}, cval{2}, 20, 30, g1)
		b.ok(2, "lifecycle", obj, "delete", nil, cval{2}, 40, 50, g1)
		b.ok(1, "lifecycle", obj, "add", []string{"1"}, cval{1}, 60, 70, g2)
		if after != nil {
			after(b)
		}
		b.final(9, "lifecycle", obj, "get", cval{final}, 100, 101, g2)
		return b
	}
	check := func(b *hist) Result { return w.Check(b.h, b.finalState(nil)) }
	wantClean(t, check(build(nil, 1)))

	// The deleted object answered after its delete returned.
	r := check(build(func(b *hist) { b.ok(3, "lifecycle", obj, "get", nil, cval{2}, 80, 90, g1) }, 1))
	wantViolation(t, r.Violations, "deleted-state-back")
	// The new object holds the deleted adds.
	r = check(build(func(b *hist) { b.ok(3, "lifecycle", obj, "get", nil, cval{3}, 80, 90, g2) }, 3))
	wantViolation(t, r.Violations, "counter-bounds")
	// The add acknowledged after the delete is missing.
	r = check(build(nil, 0))
	wantViolation(t, r.Violations, "lost")

	// A delete of unknown outcome: the value may have started again, so
	// only the adds of the final read's own generation must be there.
	b := newHist()
	b.ok(1, "lifecycle", obj, "add", []string{"1"}, cval{1}, 0, 10, g1)
	b.unknown(2, "lifecycle", obj, "delete", nil, 20)
	b.ok(1, "lifecycle", obj, "add", []string{"1"}, cval{1}, 40, 50, g2)
	b.final(9, "lifecycle", obj, "get", cval{1}, 100, 101, g2)
	wantClean(t, check(b))
}
