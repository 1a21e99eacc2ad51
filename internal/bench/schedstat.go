package bench

import (
	"fmt"
	"math"
	"runtime/metrics"
	"time"
)

// schedSample is a reading of the Go runtime's histograms of scheduling
// latency (how long a runnable goroutine waited for a processor: the run
// queue) and of stop-the-world pauses, with the GC cycle count and the
// time: what a call waits on that is no lock of meshloc's.
type schedSample struct {
	sched, pauses *metrics.Float64Histogram
	gcs           uint64
	at            time.Time
}

func readSched() schedSample {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}, {Name: "/sched/pauses/total/gc:seconds"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return schedSample{sched: cloneHist(s[0].Value.Float64Histogram()), pauses: cloneHist(s[1].Value.Float64Histogram()), gcs: s[2].Value.Uint64(), at: time.Now()}
}

func cloneHist(h *metrics.Float64Histogram) *metrics.Float64Histogram {
	return &metrics.Float64Histogram{Counts: append([]uint64(nil), h.Counts...), Buckets: append([]float64(nil), h.Buckets...)}
}

// since returns the measures (their names end in suffix) of what happened
// between s0 and s: run-queue wait p50 and p99, and, when a GC ran, GC
// pause p99 and GC cycles per second (the process's: etcd, the nodes and
// the clients share it).
func (s schedSample) since(s0 schedSample, suffix string) []Measure {
	w50, n := histQuantile(s0.sched, s.sched, 0.5)
	w99, _ := histQuantile(s0.sched, s.sched, 0.99)
	p99, np := histQuantile(s0.pauses, s.pauses, 0.99)
	gcs := s.gcs - s0.gcs
	el := s.at.Sub(s0.at).Seconds()
	out := []Measure{
		{Name: "run-queue wait p50, calls" + suffix, Value: w50 * 1e3, Unit: "ms", N: int64(n)},
		{Name: "run-queue wait p99, calls" + suffix, Value: w99 * 1e3, Unit: "ms", N: int64(n)},
	}
	if gcs > 0 && np > 0 {
		out = append(out,
			Measure{Name: "GC pause p99, calls" + suffix, Value: p99 * 1e3, Unit: "ms", N: int64(np), Note: fmt.Sprintf("%d GC cycles", gcs)},
			Measure{Name: "GC cycles/s, calls" + suffix, Value: float64(gcs) / el, Unit: "/s", N: int64(gcs)})
	}
	return out
}

// histQuantile is the q-quantile of the observations two readings a and b
// of one histogram differ by (the upper bound of its bucket), and their
// count.
func histQuantile(a, b *metrics.Float64Histogram, q float64) (float64, uint64) {
	var total uint64
	d := make([]uint64, len(b.Counts))
	for i := range b.Counts {
		d[i] = b.Counts[i] - a.Counts[i]
		total += d[i]
	}
	if total == 0 {
		return 0, 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var acc uint64
	for i, c := range d {
		acc += c
		if acc >= want {
			if hi := b.Buckets[i+1]; !math.IsInf(hi, 1) {
				return hi, total
			}
			return b.Buckets[i], total
		}
	}
	return b.Buckets[len(b.Buckets)-1], total
}
