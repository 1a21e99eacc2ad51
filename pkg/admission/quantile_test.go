package admission

import (
	"math"
	"os/exec"
	"runtime/metrics"
	"strings"
	"testing"
)

func TestQuantile(t *testing.T) {
	inf := math.Inf(1)
	buckets := []float64{0, 1, 2, 4, inf}
	h := func(c ...uint64) *metrics.Float64Histogram {
		return &metrics.Float64Histogram{Counts: c, Buckets: buckets}
	}
	for _, c := range []struct {
		name  string
		a, b  *metrics.Float64Histogram
		q     float64
		want  float64
		wantN uint64
	}{
		{"between readings", h(5, 5, 5, 5), h(5, 95, 9, 5), 0.5, 2, 94},
		{"p99 in the tail", h(0, 0, 0, 0), h(0, 98, 1, 1), 0.99, 4, 100},
		{"unbounded bucket: its lower bound", h(0, 0, 0, 0), h(0, 0, 0, 3), 0.99, 4, 3},
		{"q 0 is the first observation's bucket", h(0, 0, 0, 0), h(0, 0, 7, 1), 0, 4, 8},
		{"nothing observed", h(1, 2, 3, 4), h(1, 2, 3, 4), 0.99, 0, 0},
		{"an earlier reading second", h(1, 2, 3, 4), h(1, 1, 3, 4), 0.99, 0, 0},
		{"shapes differ", h(1, 2, 3), h(1, 2, 3, 4), 0.99, 0, 0},
		{"nil", nil, h(1, 2, 3, 4), 0.99, 0, 0},
	} {
		got, n := Quantile(c.a, c.b, c.q)
		if got != c.want || n != c.wantN {
			t.Errorf("%s: got %v over %d, want %v over %d", c.name, got, n, c.want, c.wantN)
		}
	}
	// Clone copies: a later change of the source leaves it alone.
	src := h(1, 2, 3, 4)
	cl := Clone(src)
	src.Counts[0] = 99
	if cl.Counts[0] != 1 || Clone(nil) != nil {
		t.Errorf("Clone shares its source's counts")
	}
}

// The package decides and never waits: no clock, timer, goroutine or
// network (doc.go).
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := map[string]bool{"errors": true, "fmt": true, "math": true, "runtime/metrics": true, "time": true}
	for _, imp := range strings.Fields(string(out)) {
		if !allowed[imp] {
			t.Errorf("pkg/admission imports %s", imp)
		}
	}
	src, err := exec.Command("sh", "-c", "cat $(ls *.go | grep -v _test.go)").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, banned := range []string{"time.Now", "time.Since", "time.Sleep", "time.After", "time.NewTimer", "time.NewTicker", "time.Tick", "go func"} {
		if strings.Contains(string(src), banned) {
			t.Errorf("pkg/admission calls %s: times come in as arguments", banned)
		}
	}
}
