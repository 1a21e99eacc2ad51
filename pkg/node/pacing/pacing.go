// Package pacing owns a node's pacing of background relocations: it
// samples the process's run queue, steps an admission Governor every tick
// (pkg/admission decides the rate), and makes background work wait for
// its Pacer, so that the calls the node serves keep their latency. It also
// holds the wire half of a target's share (metadata.go): a background
// stream's claim, the rate a target answers, and what a source believes
// of its peers.
package pacing

import (
	"context"
	"math"
	rtmetrics "runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/pkg/admission"
	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// ErrDeferred: a background relocation waited for the node's pacing as
// long as its timeout allows and did not start (the node's calls were
// slow, so background work starts at a lower rate); nothing was done. Ask
// again later, or as a foreground relocation.
var ErrDeferred = wire.Sentinel(pb.Code_CODE_RESOURCE_EXHAUSTED, "node: background relocation deferred while calls are slow")

// Tick is how often the node samples the run queue and steps its
// Governor: often enough to slow a storm within a few of a call's tails,
// seldom enough that each sample holds thousands of scheduling events.
const Tick = 100 * time.Millisecond

// Deps is what a Pacing needs of its node.
type Deps struct {
	Clock   clock.Clock
	Log     zerolog.Logger
	Metrics *prometheus.Registry
	// Draining reports whether the node drains: then everything starts at
	// once.
	Draining func() bool
	// Stopping is closed when the node stops; Wait then fails with
	// ErrStopping.
	Stopping    <-chan struct{}
	ErrStopping error
}

// Pacing is a node's Governor and Pacer with what they are fed.
type Pacing struct {
	cfg admission.Config
	d   Deps
	m   *metrics
	// calls served (CallServed), read at each tick.
	calls atomic.Int64
	mu    sync.Mutex
	// runQueue reads the process's run-queue wait histogram (a seam: the
	// tests give their own).
	runQueue func() *rtmetrics.Float64Histogram
	gov      *admission.Governor
	pacer    admission.Pacer
	started  float64       // units started since the last tick
	changed  chan struct{} // closed (and replaced) when the rate changes or a drain begins
}

// New is the pacing of cfg (Enabled false: off), its metrics registered on
// d.Metrics.
func New(cfg admission.Config, d Deps) *Pacing {
	return &Pacing{cfg: cfg, d: d, m: registerMetrics(d.Metrics), runQueue: readRunQueue,
		gov: admission.NewGovernor(cfg), changed: make(chan struct{})}
}

// Enabled reports whether the node paces background relocations.
func (p *Pacing) Enabled() bool { return p.cfg.Enabled() }

// CallServed counts one call served: foreground work, which background
// work yields to.
func (p *Pacing) CallServed() { p.calls.Add(1) }

// SetRunQueue makes the pacing read the run-queue wait histogram from f
// from its next tick on (tests make the calls look slow).
func (p *Pacing) SetRunQueue(f func() *rtmetrics.Float64Histogram) {
	p.mu.Lock()
	p.runQueue = f
	p.mu.Unlock()
}

// readRunQueue is the Go runtime's histogram of how long runnable
// goroutines waited for a processor, for the whole process.
func readRunQueue() *rtmetrics.Float64Histogram {
	s := []rtmetrics.Sample{{Name: "/sched/latencies:seconds"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindFloat64Histogram {
		return nil
	}
	return admission.Clone(s[0].Value.Float64Histogram())
}

func (p *Pacing) readRunQueue() *rtmetrics.Float64Histogram {
	p.mu.Lock()
	read := p.runQueue
	p.mu.Unlock()
	return read()
}

// wakeLocked makes every waiting relocation look again.
func (p *Pacing) wakeLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Wake makes background relocations waiting for the Pacer look again (a
// drain began: they start at once).
func (p *Pacing) Wake() {
	p.mu.Lock()
	p.wakeLocked()
	p.mu.Unlock()
}

// Run steps the Governor every Tick until ctx ends (the node runs it when
// pacing is on).
func (p *Pacing) Run(ctx context.Context) {
	now := p.d.Clock.Now
	t := p.d.Clock.NewTicker(Tick)
	defer t.Stop()
	prev, prevAt, prevCalls := p.readRunQueue(), now(), p.calls.Load()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		h, at, calls := p.readRunQueue(), now(), p.calls.Load()
		p99, _ := admission.Quantile(prev, h, 0.99)
		p.mu.Lock()
		lim := p.gov.Step(admission.Sample{Interval: at.Sub(prevAt), WaitP99: time.Duration(p99 * float64(time.Second)),
			Calls: calls - prevCalls, Started: p.started})
		p.started = 0
		was := p.pacer.Rate()
		if lim.Rate != was {
			p.pacer.SetRate(at, lim.Rate)
			p.wakeLocked()
		}
		p.mu.Unlock()
		if math.IsInf(was, 1) != math.IsInf(lim.Rate, 1) { // opened or slowed: once per change, at debug level
			p.d.Log.Debug().Str("state", lim.State.String()).Float64("rate", lim.Rate).Dur("runQueueP99", time.Duration(p99*float64(time.Second))).
				Int64("calls", calls-prevCalls).Msg("background relocations")
		}
		p.m.runQueueP99.Set(p99)
		p.m.backgroundRate.Set(lim.Rate)
		prev, prevAt, prevCalls = h, at, calls
	}
}

// Rate is the rate, in units per second, at which the node starts
// background relocations now: +Inf while it does not pace them (pacing
// off, or its calls' latency within the target).
func (p *Pacing) Rate() float64 {
	if !p.cfg.Enabled() {
		return math.Inf(1)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pacer.Rate()
}
