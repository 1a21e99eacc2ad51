package asleep

import (
	"strconv"
	"testing"
)

// TestNoFalseNegatives: every name added is found, across the growth of the
// filter list, and names never added are found at most at the bound's rate.
func TestNoFalseNegatives(t *testing.T) {
	var s Set
	if s.Maybe("actor/counter/x") {
		t.Fatal("an empty set says it may hold a name")
	}
	const n = 300_000 // several filters: 64 Ki, 128 Ki, 256 Ki names
	for i := range n {
		s.Add("actor/dcounter/a" + strconv.Itoa(i))
	}
	for i := range n {
		if !s.Maybe("actor/dcounter/a" + strconv.Itoa(i)) {
			t.Fatalf("a%d was added and is not found", i)
		}
	}
	if len(s.filters) < 3 {
		t.Fatalf("%d filters for %d names, want the list to have grown", len(s.filters), n)
	}
	fp := 0
	const probes = 100_000
	for i := range probes {
		if s.Maybe("actor/dcounter/b" + strconv.Itoa(i)) {
			fp++
		}
	}
	if rate := float64(fp) / probes; rate > 2*firstRate {
		t.Fatalf("false positives %.4f, want at most %.2f", rate, 2*firstRate)
	}
	if s.Names() > n || s.Names() < n*95/100 {
		t.Fatalf("Names %d, want about %d", s.Names(), n)
	}
	if b := s.Bytes(); b == 0 || b > 3*n { // a filter is sized for twice the names before it
		t.Fatalf("%d bytes for %d names", b, n)
	}
}

// TestAddTwiceCountsOnce: a name that sleeps again is not counted again.
func TestAddTwiceCountsOnce(t *testing.T) {
	var s Set
	s.Add("actor/counter/x")
	s.Add("actor/counter/x")
	if s.Names() != 1 {
		t.Fatalf("Names %d, want 1", s.Names())
	}
}
