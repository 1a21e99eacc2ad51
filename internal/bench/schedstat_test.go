package bench

import (
	"math"
	"runtime/metrics"
	"testing"
)

// The quantiles of what two readings of a histogram differ by: the upper
// bound of the bucket the quantile falls in; an open last bucket gives
// its lower bound.
func TestHistQuantile(t *testing.T) {
	b := []float64{0, 1, 2, 4, math.Inf(1)}
	a := &metrics.Float64Histogram{Buckets: b, Counts: []uint64{5, 5, 5, 5}}
	z := &metrics.Float64Histogram{Buckets: b, Counts: []uint64{95, 5, 5, 6}}
	for _, c := range []struct {
		q    float64
		want float64
	}{{0.5, 1}, {0.9, 1}, {0.99, 4}, {1, 4}} {
		if got, n := histQuantile(a, z, c.q); got != c.want || n != 91 {
			t.Errorf("q %v: %v of %d, want %v of 91", c.q, got, n, c.want)
		}
	}
	if got, n := histQuantile(a, a, 0.5); got != 0 || n != 0 {
		t.Errorf("no observations: %v, %d", got, n)
	}
}

// A reading against an earlier one gives the four measures, named with
// the suffix.
func TestSchedSince(t *testing.T) {
	s0 := readSched()
	ms := readSched().since(s0, ", x")
	if len(ms) < 2 || ms[1].Name != "run-queue wait p99, calls, x" {
		t.Fatalf("%+v", ms)
	}
}
