package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	rtmetrics "runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshloc/meshloc/pkg/admission"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Background relocations, paced so that the calls this node serves keep
// their latency (pkg/admission decides; this file samples and waits).

// ErrRelocationDeferred: a background relocation waited for the node's
// pacing as long as its timeout allows and did not start (the node's calls
// were slow, so background work starts at a lower rate); nothing was done.
// Ask again later, or as a foreground relocation.
var ErrRelocationDeferred = wire.Sentinel(pb.Code_CODE_RESOURCE_EXHAUSTED, "node: background relocation deferred while calls are slow")

// pacingTick is how often the node samples the run queue and steps its
// Governor: often enough to slow a storm within a few of a call's tails,
// seldom enough that each sample holds thousands of scheduling events.
const pacingTick = 100 * time.Millisecond

// pacing is a node's Governor and Pacer with what they are fed.
type pacing struct {
	cfg admission.Config
	// calls served (call), read at each tick.
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

func newPacing(cfg admission.Config) *pacing {
	return &pacing{cfg: cfg, runQueue: readRunQueue, gov: admission.NewGovernor(cfg), changed: make(chan struct{})}
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

func (p *pacing) readRunQueue() *rtmetrics.Float64Histogram {
	p.mu.Lock()
	read := p.runQueue
	p.mu.Unlock()
	return read()
}

// wakeLocked makes every waiting relocation look again.
func (p *pacing) wakeLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// runPacing steps the Governor every pacingTick until ctx ends (Start runs
// it when pacing is on).
func (n *Node) runPacing(ctx context.Context) {
	p := n.pacing
	t := n.clock.NewTicker(pacingTick)
	defer t.Stop()
	prev, prevAt, prevCalls := p.readRunQueue(), n.now(), p.calls.Load()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		h, now, calls := p.readRunQueue(), n.now(), p.calls.Load()
		p99, _ := admission.Quantile(prev, h, 0.99)
		p.mu.Lock()
		lim := p.gov.Step(admission.Sample{Interval: now.Sub(prevAt), WaitP99: time.Duration(p99 * float64(time.Second)),
			Calls: calls - prevCalls, Started: p.started})
		p.started = 0
		was := p.pacer.Rate()
		if lim.Rate != was {
			p.pacer.SetRate(now, lim.Rate)
			p.wakeLocked()
		}
		p.mu.Unlock()
		if math.IsInf(was, 1) != math.IsInf(lim.Rate, 1) { // opened or slowed: once per change, at debug level
			n.log.Debug().Str("state", lim.State.String()).Float64("rate", lim.Rate).Dur("runQueueP99", time.Duration(p99*float64(time.Second))).
				Int64("calls", calls-prevCalls).Msg("background relocations")
		}
		n.metrics.runQueueP99.Set(p99)
		n.metrics.backgroundRate.Set(lim.Rate)
		prev, prevAt, prevCalls = h, now, calls
	}
}

// admit waits until a relocation of obj, costing units (backgroundUnits)
// and whose timeout is timeout, may start, and returns how long it waited.
// One of 0 units (foreground, a draining node's, pacing off) starts at
// once; a background one waits for the node's Pacer, at most half its timeout (then
// ErrRelocationDeferred: the relocation keeps the other half), ctx's end
// or the node's stop. Nothing is held while it waits: the object serves
// on, and may meanwhile move otherwise.
func (n *Node) admit(ctx context.Context, obj keyspace.Object, cost float64, timeout time.Duration) (time.Duration, error) {
	if cost == 0 {
		return 0, nil
	}
	waited, err := n.pace(ctx, cost, timeout/2)
	switch {
	case errors.Is(err, ErrRelocationDeferred):
		err = fmt.Errorf("%w: %s waited %s, half its timeout (%.3g units; background relocations start at %.3g units/s now)", err, obj, timeout/2, cost, n.pacing.rate())
	case errors.Is(err, ErrStopping):
		err = fmt.Errorf("%w: %s was not relocated", err, obj)
	}
	return waited, err
}

// pace waits until background work of cost units may start by the node's
// Pacer, and counts it started; at most bound (then
// ErrRelocationDeferred), until ctx ends or the node stops. A draining
// node starts everything at once.
func (n *Node) pace(ctx context.Context, cost float64, bound time.Duration) (time.Duration, error) {
	p := n.pacing
	began := n.now()
	n.metrics.waiting.Inc()
	defer n.metrics.waiting.Dec()
	deadline := n.clock.NewTimer(bound)
	defer deadline.Stop()
	for {
		now, at, changed, ok := n.reserve(cost)
		if ok {
			n.metrics.admissionWait.Observe(now.Sub(began).Seconds())
			return now.Sub(began), nil
		}
		t := n.clock.NewTimer(at.Sub(now))
		var err error
		select {
		case <-t.C():
			p.mu.Lock()
			p.started += cost
			p.mu.Unlock()
			waited := n.now().Sub(began)
			n.metrics.admissionWait.Observe(waited.Seconds())
			return waited, nil
		case <-changed:
		case <-deadline.C():
			n.metrics.deferred.Inc()
			err = ErrRelocationDeferred
		case <-ctx.Done():
			err = ctx.Err()
		case <-n.stopping:
			err = ErrStopping
		}
		t.Stop()
		n.cancelReservation(n.now(), cost)
		if err != nil {
			return 0, err
		}
	}
}

// reserve books background work of cost units with the node's Pacer at
// now. ok: it starts now (counted started; a draining node starts
// everything at once). Otherwise it may start at at, booked (pace waits
// for it, or cancels), and changed is closed at the next change of rate.
func (n *Node) reserve(cost float64) (now, at time.Time, changed <-chan struct{}, ok bool) {
	p := n.pacing
	p.mu.Lock()
	defer p.mu.Unlock()
	now = n.now()
	if n.draining.Load() {
		return now, now, nil, true
	}
	if at = p.pacer.Reserve(now, cost); at.After(now) {
		return now, at, p.changed, false
	}
	p.started += cost
	return now, at, nil, true
}

// cancelReservation gives back the spacing of a reservation of cost units
// that did not start.
func (n *Node) cancelReservation(now time.Time, cost float64) {
	n.pacing.mu.Lock()
	n.pacing.pacer.Cancel(now, cost)
	n.pacing.mu.Unlock()
}

// book counts background work of cost units started now, whatever the
// Pacer says (it started without waiting: an incoming relocation whose
// source did not offer to wait); the work after it waits the longer.
func (n *Node) book(cost float64) {
	p := n.pacing
	p.mu.Lock()
	p.pacer.Reserve(n.now(), cost)
	p.started += cost
	p.mu.Unlock()
}

func (p *pacing) rate() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pacer.Rate()
}

// wakeWaiters makes background relocations waiting for the Pacer look
// again (a drain began: they start at once).
func (n *Node) wakeWaiters() {
	n.pacing.mu.Lock()
	n.pacing.wakeLocked()
	n.pacing.mu.Unlock()
}

// relocationUnits is what a relocation of obj costs the Pacer: one unit,
// and one per MiB of the states it moves as far as this node knows them
// (a group's: its members hosted here, as the location cache lists them).
func (n *Node) relocationUnits(obj keyspace.Object) float64 {
	names := []string{obj.String()}
	if obj.Kind == keyspace.KindGroup {
		names = nil
		if gs, ok := n.cache.Group(obj.String()); ok {
			names = gs.Record.Members
		}
	}
	bytes := 0
	for _, name := range names {
		if h := n.hostedObject(name); h != nil {
			bytes += max(0, h.knownStateBytes())
		}
	}
	return 1 + float64(bytes)/(1<<20)
}

// BackgroundRate is the rate, in units per second, at which this node
// starts background relocations now: +Inf while it does not pace them
// (pacing off, or its calls' latency within the target). A relocation is
// one unit and one more per MiB of its state.
func (n *Node) BackgroundRate() float64 {
	if !n.pacing.cfg.Enabled() {
		return math.Inf(1)
	}
	return n.pacing.rate()
}
