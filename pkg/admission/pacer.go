package admission

import (
	"math"
	"time"
)

// Pacer spaces the starts of background work at a rate: a start of cost
// units goes at the time Reserve names (now, or when the starts before it
// are spaced out) and holds the next one back by cost/rate after it — the
// virtual scheduling of GCRA, with a burst of one start. At an infinite
// rate every start goes at once. The zero Pacer is open.
type Pacer struct {
	rate float64 // units per second; 0 (the zero Pacer) is open
	next time.Time
}

func (p *Pacer) open() bool { return p.rate <= 0 || math.IsInf(p.rate, 1) }

// SetRate changes the rate at now. The spacing already booked is kept in
// units and spread at the new rate: reservations made before keep their
// times (their holders may Cancel and Reserve again to move).
func (p *Pacer) SetRate(now time.Time, rate float64) {
	switch {
	case rate <= 0 || math.IsInf(rate, 1):
		p.rate, p.next = 0, time.Time{}
	case p.open():
		p.rate, p.next = rate, now
	default:
		booked := max(0, p.next.Sub(now).Seconds()) * p.rate
		p.rate = rate
		p.next = now.Add(seconds(booked / rate))
	}
}

// Rate is the current rate, +Inf when open.
func (p *Pacer) Rate() float64 {
	if p.open() {
		return math.Inf(1)
	}
	return p.rate
}

// Reserve books a start of cost units and answers when it may go: now, or
// later when starts before it hold it back.
func (p *Pacer) Reserve(now time.Time, cost float64) time.Time {
	if p.open() {
		return now
	}
	at := now
	if p.next.After(now) {
		at = p.next
	}
	p.next = at.Add(seconds(max(0, cost) / p.rate))
	return at
}

// Cancel gives back the spacing of a reservation of cost units that will
// not start (its caller gave up, or reserves again after a change of rate).
// Starts booked after it keep their times; later ones gain.
func (p *Pacer) Cancel(now time.Time, cost float64) {
	if p.open() {
		return
	}
	p.next = p.next.Add(-seconds(max(0, cost) / p.rate))
	if p.next.Before(now) {
		p.next = now
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
