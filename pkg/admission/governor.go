package admission

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Defaults of a node's Config.
const (
	// DefaultLatencyTarget is the run-queue wait p99 above which background
	// work slows while calls are served. A call served from memory takes
	// tens of microseconds end to end and makes about half a dozen
	// hand-offs, each of which may wait in the run queue; on a node that is
	// not busy the p99 of that wait is a few tens of microseconds. Measured
	// with meshctl bench (a relocation storm beside serial calls to objects
	// it does not move), 1 ms let the storm double those calls' p99, 250 µs
	// did not.
	DefaultLatencyTarget = 250 * time.Microsecond
	// DefaultMinRate is the background work started per second whatever the
	// latency: ten small relocations a second, or one of 9 MiB.
	DefaultMinRate = 10
	// MaxRate is the highest Slowed rate: above it the Governor opens.
	MaxRate = 1e6
)

// ErrInvalidConfig: a Config field is out of its range.
var ErrInvalidConfig = errors.New("admission: invalid config")

// Config of a Governor.
type Config struct {
	// LatencyTarget is the run-queue wait p99 above which background work
	// slows while calls are served; 0 turns pacing off (every relocation
	// starts at once, as a foreground one).
	LatencyTarget time.Duration
	// MinRate is how many units of background work may start per second
	// however slow the calls are (at least 0.01: work is never refused
	// for ever).
	MinRate float64
}

// DefaultConfig is pacing on, with the defaults above.
func DefaultConfig() Config {
	return Config{LatencyTarget: DefaultLatencyTarget, MinRate: DefaultMinRate}
}

// Enabled: background work is paced.
func (c Config) Enabled() bool { return c.LatencyTarget > 0 }

// Validate checks the ranges: a target of 0 (off) or within [10µs, 1s], a
// MinRate within [0.01, MaxRate].
func (c Config) Validate() error {
	if c.LatencyTarget != 0 && (c.LatencyTarget < 10*time.Microsecond || c.LatencyTarget > time.Second) {
		return fmt.Errorf("%w: latency target %s is outside [10µs, 1s] (0: off)", ErrInvalidConfig, c.LatencyTarget)
	}
	if math.IsNaN(c.MinRate) || c.MinRate < 0.01 || c.MinRate > MaxRate {
		return fmt.Errorf("%w: minimum rate %g is outside [0.01, %g] units/s", ErrInvalidConfig, c.MinRate, float64(MaxRate))
	}
	return nil
}

// State of a Governor.
type State int

const (
	// Open: background work starts at once.
	Open State = 1 + iota
	// Slowed: background work starts at Limit.Rate units per second.
	Slowed
)

func (s State) String() string {
	switch s {
	case Open:
		return "open"
	case Slowed:
		return "slowed"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Limit is a Governor's answer.
type Limit struct {
	State State
	// Rate in units per second; +Inf when Open.
	Rate float64
}

// Sample is what a node saw over one interval.
type Sample struct {
	// Interval since the previous sample; one of 0 or less teaches nothing.
	Interval time.Duration
	// WaitP99 is the run-queue wait p99 over the interval (0: none measured).
	WaitP99 time.Duration
	// Calls served in the interval.
	Calls int64
	// Started: units of background work started in the interval.
	Started float64
}

// Governor holds the limit between samples (see the package doc's rule).
type Governor struct {
	cfg Config
	lim Limit
}

// NewGovernor starts Open.
func NewGovernor(cfg Config) *Governor {
	return &Governor{cfg: cfg, lim: Limit{State: Open, Rate: math.Inf(1)}}
}

// Limit is the current limit.
func (g *Governor) Limit() Limit { return g.lim }

// Step takes one sample and answers the limit until the next.
func (g *Governor) Step(s Sample) Limit {
	switch {
	case !g.cfg.Enabled() || s.Calls <= 0:
		g.lim = Limit{State: Open, Rate: math.Inf(1)}
	case s.Interval <= 0:
	case s.WaitP99 > g.cfg.LatencyTarget:
		rate := max(0, s.Started) / s.Interval.Seconds()
		if g.lim.State == Slowed {
			rate = min(rate, g.lim.Rate)
		}
		f := min(0.5, max(0.1, float64(g.cfg.LatencyTarget)/float64(s.WaitP99)))
		g.lim = Limit{State: Slowed, Rate: max(g.cfg.MinRate, rate*f)}
	case g.lim.State == Slowed:
		if r := g.lim.Rate*1.1 + g.cfg.MinRate/10; r <= MaxRate {
			g.lim.Rate = r
		} else {
			g.lim = Limit{State: Open, Rate: math.Inf(1)}
		}
	}
	return g.lim
}
