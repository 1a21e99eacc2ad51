package pacing

import (
	"context"
	"time"
)

// Wait waits until background work of cost units may start by the node's
// Pacer, and counts it started; at most bound (then ErrDeferred), until
// ctx ends or the node stops (ErrStopping). A draining node starts
// everything at once.
func (p *Pacing) Wait(ctx context.Context, cost float64, bound time.Duration) (time.Duration, error) {
	c := p.d.Clock
	began := c.Now()
	p.m.waiting.Inc()
	defer p.m.waiting.Dec()
	deadline := c.NewTimer(bound)
	defer deadline.Stop()
	for {
		now, at, changed, ok := p.reserve(cost)
		if ok {
			p.m.admissionWait.Observe(now.Sub(began).Seconds())
			return now.Sub(began), nil
		}
		t := c.NewTimer(at.Sub(now))
		var err error
		select {
		case <-t.C():
			p.mu.Lock()
			p.started += cost
			p.mu.Unlock()
			waited := c.Now().Sub(began)
			p.m.admissionWait.Observe(waited.Seconds())
			return waited, nil
		case <-changed:
		case <-deadline.C():
			p.m.deferred.Inc()
			err = ErrDeferred
		case <-ctx.Done():
			err = ctx.Err()
		case <-p.d.Stopping:
			err = p.d.ErrStopping
		}
		t.Stop()
		p.cancel(c.Now(), cost)
		if err != nil {
			return 0, err
		}
	}
}

// StartsNow reports whether background work of cost units may start at
// once by the node's Pacer, and if so counts it started.
func (p *Pacing) StartsNow(cost float64) bool {
	now, _, _, ok := p.reserve(cost)
	if !ok {
		p.cancel(now, cost)
		return false
	}
	p.m.admissionWait.Observe(0)
	return true
}

// reserve books background work of cost units with the Pacer at now. ok:
// it starts now (counted started; a draining node starts everything at
// once). Otherwise it may start at at, booked (Wait waits for it, or
// cancels), and changed is closed at the next change of rate.
func (p *Pacing) reserve(cost float64) (now, at time.Time, changed <-chan struct{}, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now = p.d.Clock.Now()
	if p.d.Draining() {
		return now, now, nil, true
	}
	if at = p.pacer.Reserve(now, cost); at.After(now) {
		return now, at, p.changed, false
	}
	p.started += cost
	return now, at, nil, true
}

// cancel gives back the spacing of a reservation of cost units that did
// not start.
func (p *Pacing) cancel(now time.Time, cost float64) {
	p.mu.Lock()
	p.pacer.Cancel(now, cost)
	p.mu.Unlock()
}

// Book counts background work of cost units started now, whatever the
// Pacer says (it started without waiting: an incoming relocation whose
// source did not offer to wait); the work after it waits the longer.
func (p *Pacing) Book(cost float64) {
	p.mu.Lock()
	p.pacer.Reserve(p.d.Clock.Now(), cost)
	p.started += cost
	p.mu.Unlock()
}

// Deferred counts a background relocation deferred by its target (which
// did not admit it in time).
func (p *Pacing) Deferred() { p.m.deferred.Inc() }
