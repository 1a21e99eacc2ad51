package traffic

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
)

func TestSketchCountsExactlyBelowCapacity(t *testing.T) {
	s := New(8, 0)
	for i := range 5 {
		for range i + 1 {
			s.Observe(1, fmt.Sprintf("a%d", i), "b", 1, i%2 == 0)
		}
	}
	top := s.Top(1, 0)
	if len(top) != 5 || top[0] != (Edge{From: "a4", To: "b", Count: 5}) || top[4] != (Edge{From: "a0", To: "b", Count: 1}) {
		t.Fatalf("top: %v", top)
	}
	if m, c := s.Totals(1); m != 15 || c != 1+3+5 {
		t.Fatalf("totals %d %d", m, c)
	}
	if got := s.Top(1, 2); len(got) != 2 || got[1].From != "a3" {
		t.Fatalf("top 2: %v", got)
	}
}

// Space-Saving's promise: an edge heavier than total/k is kept, and a
// kept count overestimates by at most Err ≤ total/k.
func TestSketchKeepsHeavyHitters(t *testing.T) {
	const k = 16
	s := New(k, 0)
	rng := rand.New(rand.NewPCG(1, 2))
	truth := map[string]uint64{}
	total := uint64(0)
	for range 20000 {
		var from string
		if rng.IntN(3) == 0 {
			from = fmt.Sprintf("heavy%d", rng.IntN(4)) // 4 edges with a twelfth each
		} else {
			from = fmt.Sprintf("light%d", rng.IntN(5000))
		}
		truth[from]++
		total++
		s.Observe(0, from, "x", 1, false)
	}
	if s.Len() > k {
		t.Fatalf("%d edges kept, capacity %d", s.Len(), k)
	}
	kept := map[string]Edge{}
	for _, e := range s.Top(0, 0) {
		kept[e.From] = e
		if e.Count < truth[e.From] || e.Count-truth[e.From] > e.Err || e.Err > total/k {
			t.Errorf("%s: count %d, true %d, err %d (bound %d)", e.From, e.Count, truth[e.From], e.Err, total/k)
		}
	}
	for from, n := range truth {
		if n > total/k {
			if _, ok := kept[from]; !ok {
				t.Errorf("heavy edge %s (%d of %d) not kept", from, n, total)
			}
		}
	}
}

func TestSketchDecays(t *testing.T) {
	s := New(4, 1000)
	s.Observe(0, "a", "b", 8, true)
	s.Observe(500, "c", "d", 1, false)
	if top := s.Top(999, 0); top[0].Count != 8 || len(top) != 2 {
		t.Fatalf("before a half-life: %v", top)
	}
	// Two half-lives: 8 → 2, 1 → 0 (gone).
	if top := s.Top(2100, 0); len(top) != 1 || top[0].Count != 2 {
		t.Fatalf("after two half-lives: %v", top)
	}
	if m, c := s.Totals(2100); m != 2 || c != 2 {
		t.Fatalf("totals %d %d", m, c)
	}
	// The halving keeps its phase: at 3000 the third.
	s.Observe(3000, "a", "b", 1, false)
	if top := s.Top(3000, 0); top[0].Count != 2 {
		t.Fatalf("third half-life: %v", top)
	}
	// A clock that goes back does not decay.
	s.Observe(10, "a", "b", 1, false)
	if top := s.Top(10, 0); top[0].Count != 3 {
		t.Fatalf("clock back: %v", top)
	}
}

func BenchmarkObserve(b *testing.B) {
	s := New(DefaultCapacity, 60000)
	names := make([]string, 100000)
	for i := range names {
		names[i] = fmt.Sprintf("actor/pp/o%d", i)
	}
	b.ResetTimer()
	for i := range b.N {
		s.Observe(int64(i/1000), names[i%len(names)], names[(i*7)%len(names)], 1, i%3 == 0)
	}
}

// docs/contributing.md: a pure core imports no network, clock, goroutine,
// context, randomness or etcd package.
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, d := range strings.Fields(string(out)) {
		switch {
		case d == "net" || strings.HasPrefix(d, "net/") || d == "context" || d == "time" || d == "os" || d == "math/rand" || d == "math/rand/v2",
			strings.HasPrefix(d, "go.etcd.io/"), strings.HasPrefix(d, "google.golang.org/grpc"):
			t.Errorf("pkg/traffic depends on %s", d)
		}
	}
}
