package shrink

import (
	"runtime"
	"testing"
)

// TestDeletedRebuildsAnEmptiedMap: a map emptied below a quarter of its
// peak is rebuilt with the same entries, and its old table is freed.
func TestDeletedRebuildsAnEmptiedMap(t *testing.T) {
	const n = 200_000
	m := make(map[int][64]byte)
	for i := range n {
		m[i] = [64]byte{}
	}
	var p Peak
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	full := heap()
	for i := range n - 10 {
		delete(m, i)
		before := len(m)
		if m = Deleted(m, &p); len(m) != before {
			t.Fatalf("rebuild lost entries: %d, want %d", len(m), before)
		}
	}
	for i := n - 10; i < n; i++ {
		if _, ok := m[i]; !ok {
			t.Fatalf("entry %d lost", i)
		}
	}
	if after := heap(); after > full/8 {
		t.Fatalf("heap %d bytes after emptying a map of %d bytes: the table was kept", after, full)
	}
	if p.n > n/4 {
		t.Fatalf("peak %d after emptying: never rebuilt", p.n)
	}
}

// TestDeletedLeavesSmallMaps: below Min entries nothing is copied.
func TestDeletedLeavesSmallMaps(t *testing.T) {
	m := map[int]int{}
	for i := range Min - 1 {
		m[i] = i
	}
	var p Peak
	for i := range Min - 2 {
		delete(m, i)
		m = Deleted(m, &p)
	}
	if p.n != Min-1 {
		t.Fatalf("peak %d, want %d (never rebuilt)", p.n, Min-1)
	}
}

// TestGrewThenBulkDelete: an owner that notes its inserts may remove many
// entries before one call of Deleted.
func TestGrewThenBulkDelete(t *testing.T) {
	m := map[int]int{}
	var p Peak
	for i := range 4 * Min {
		m[i] = i
		p.Grew(len(m))
	}
	for i := range 4*Min - 1 {
		delete(m, i)
	}
	if m = Deleted(m, &p); p.n != 1 || m[4*Min-1] != 4*Min-1 {
		t.Fatalf("peak %d after the bulk delete, map %v: want a rebuild keeping the last entry", p.n, m)
	}
}
