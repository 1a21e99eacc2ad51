package admission

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestTranscripts runs testdata/*.txt, the specification of the Governor
// and the Pacer (`go test ./pkg/admission -rewrite` regenerates them).
//
//	governor [target=DUR] [min=RATE]     a new Governor (defaults: 1ms, 10/s)
//	sample [interval=DUR] [p99=DUR] [calls=N] [started=UNITS]
//	    steps the Governor (interval 100ms, p99 0, calls 0, started 0);
//	    prints the limit
//	rate now=MS rate=R|inf               the Pacer's rate at now (ms)
//	reserve now=MS [cost=UNITS]          prints when the start may go (ms)
//	cancel now=MS [cost=UNITS]
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var g *Governor
		var p Pacer
		epoch := time.Unix(1_000_000, 0)
		at := func(d *datadriven.TestData) time.Time {
			var ms int
			d.ScanArgs(t, "now", &ms)
			return epoch.Add(time.Duration(ms) * time.Millisecond)
		}
		cost := func(d *datadriven.TestData) float64 {
			c := 1.0
			if d.HasArg("cost") {
				var s string
				d.ScanArgs(t, "cost", &s)
				c = num(t, s)
			}
			return c
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "governor":
				cfg := DefaultConfig()
				if d.HasArg("target") {
					cfg.LatencyTarget = dur(t, d, "target")
				}
				if d.HasArg("min") {
					var s string
					d.ScanArgs(t, "min", &s)
					cfg.MinRate = num(t, s)
				}
				if err := cfg.Validate(); err != nil {
					return err.Error()
				}
				g = NewGovernor(cfg)
				return show(g.Limit())
			case "sample":
				s := Sample{Interval: 100 * time.Millisecond}
				if d.HasArg("interval") {
					s.Interval = dur(t, d, "interval")
				}
				if d.HasArg("p99") {
					s.WaitP99 = dur(t, d, "p99")
				}
				if d.HasArg("calls") {
					d.ScanArgs(t, "calls", &s.Calls)
				}
				if d.HasArg("started") {
					var v string
					d.ScanArgs(t, "started", &v)
					s.Started = num(t, v)
				}
				return show(g.Step(s))
			case "rate":
				var r string
				d.ScanArgs(t, "rate", &r)
				p.SetRate(at(d), num(t, r))
				return fmt.Sprintf("rate %s", rate(p.Rate()))
			case "reserve":
				now := at(d)
				return fmt.Sprintf("go at %d, %s", p.Reserve(now, cost(d)).Sub(epoch).Milliseconds(), free(p, epoch))
			case "cancel":
				p.Cancel(at(d), cost(d))
				return free(p, epoch)
			}
			return "unknown command " + d.Cmd
		})
	})
}

// free is when the next start could go, ms from epoch (open: any time).
func free(p Pacer, epoch time.Time) string {
	if p.open() {
		return "open"
	}
	return fmt.Sprintf("next free at %d", p.next.Sub(epoch).Milliseconds())
}

func show(l Limit) string { return fmt.Sprintf("%s %s", l.State, rate(l.Rate)) }

func rate(r float64) string {
	if math.IsInf(r, 1) {
		return "inf"
	}
	return strconv.FormatFloat(r, 'f', 2, 64) + "/s"
}

func num(t *testing.T, s string) float64 {
	if s == "inf" {
		return math.Inf(1)
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "/s"), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func dur(t *testing.T, d *datadriven.TestData, key string) time.Duration {
	var s string
	d.ScanArgs(t, key, &s)
	v, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
