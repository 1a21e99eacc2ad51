package bench

import (
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

// pct and ms are report.Pct and report.Ms.
func pct(d []time.Duration, p float64) time.Duration { return report.Pct(d, p) }
func ms(d time.Duration) float64                     { return report.Ms(d) }
