package bench

import (
	"slices"
	"time"

	"github.com/meshloc/meshloc/internal/bench/report"
)

// What a run produces is internal/bench/report's.
type (
	Measure    = report.Measure
	Target     = report.Target
	Figure     = report.Figure
	Machine    = report.Machine
	Report     = report.Report
	Comparison = report.Comparison
)

// pct returns the p-th percentile (0..100) of d, nearest rank.
func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[max(0, min(len(s)-1, i))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
