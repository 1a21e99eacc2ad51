// Package procstat reads what a bench run's own process spent: the Go
// runtime's scheduling latency and pauses (Sched) and CPU time (CPUMeter).
// etcd, the nodes and the clients of a run share the process.
package procstat

import (
	"fmt"
	"runtime/metrics"
	"time"

	"github.com/meshloc/meshloc/internal/bench/report"
	"github.com/meshloc/meshloc/pkg/admission"
)

// Sched is a reading of the Go runtime's histograms of scheduling
// latency (how long a runnable goroutine waited for a processor: the run
// queue) and of stop-the-world pauses, with the GC cycle count and the
// time: what a call waits on that is no lock of meshloc's.
type Sched struct {
	sched, pauses *metrics.Float64Histogram
	gcs           uint64
	at            time.Time
}

// ReadSched reads them now.
func ReadSched() Sched {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}, {Name: "/sched/pauses/total/gc:seconds"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return Sched{sched: admission.Clone(s[0].Value.Float64Histogram()), pauses: admission.Clone(s[1].Value.Float64Histogram()), gcs: s[2].Value.Uint64(), at: time.Now()}
}

// Since returns the measures (their names end in suffix) of what happened
// between s0 and s: run-queue wait p50 and p99, and, when a GC ran, GC
// pause p99 and GC cycles per second (the process's: etcd, the nodes and
// the clients share it).
func (s Sched) Since(s0 Sched, suffix string) []report.Measure {
	w50, n := admission.Quantile(s0.sched, s.sched, 0.5)
	w99, _ := admission.Quantile(s0.sched, s.sched, 0.99)
	p99, np := admission.Quantile(s0.pauses, s.pauses, 0.99)
	gcs := s.gcs - s0.gcs
	el := s.at.Sub(s0.at).Seconds()
	out := []report.Measure{
		{Name: "run-queue wait p50, calls" + suffix, Value: w50 * 1e3, Unit: "ms", N: int64(n)},
		{Name: "run-queue wait p99, calls" + suffix, Value: w99 * 1e3, Unit: "ms", N: int64(n)},
	}
	if gcs > 0 && np > 0 {
		out = append(out,
			report.Measure{Name: "GC pause p99, calls" + suffix, Value: p99 * 1e3, Unit: "ms", N: int64(np), Note: fmt.Sprintf("%d GC cycles", gcs)},
			report.Measure{Name: "GC cycles/s, calls" + suffix, Value: float64(gcs) / el, Unit: "/s", N: int64(gcs)})
	}
	return out
}
