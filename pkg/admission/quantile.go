package admission

import (
	"math"
	"runtime/metrics"
)

// Quantile is the q-quantile of the observations two readings a (earlier)
// and b (later) of one cumulative runtime/metrics histogram differ by (the
// upper bound of its bucket; the lower one for the last, unbounded bucket),
// and their count. Readings of different shapes, or no observation between
// them, give 0, 0.
func Quantile(a, b *metrics.Float64Histogram, q float64) (float64, uint64) {
	if a == nil || b == nil || len(a.Counts) != len(b.Counts) || len(b.Buckets) != len(b.Counts)+1 {
		return 0, 0
	}
	var total uint64
	for i := range b.Counts {
		if b.Counts[i] < a.Counts[i] {
			return 0, 0 // not a later reading of the same histogram
		}
		total += b.Counts[i] - a.Counts[i]
	}
	if total == 0 {
		return 0, 0
	}
	want := max(1, uint64(math.Ceil(q*float64(total))))
	var acc uint64
	for i := range b.Counts {
		acc += b.Counts[i] - a.Counts[i]
		if acc >= want {
			if hi := b.Buckets[i+1]; !math.IsInf(hi, 1) {
				return hi, total
			}
			return b.Buckets[i], total
		}
	}
	return b.Buckets[len(b.Buckets)-1], total
}

// Clone copies a reading: runtime/metrics reuses a sample's histogram at
// the next Read.
func Clone(h *metrics.Float64Histogram) *metrics.Float64Histogram {
	if h == nil {
		return nil
	}
	return &metrics.Float64Histogram{Counts: append([]uint64(nil), h.Counts...), Buckets: append([]float64(nil), h.Buckets...)}
}
