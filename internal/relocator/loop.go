package relocator

import (
	"sync"
	"time"

	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/relocation"
)

// machine is either side's pure state machine.
type machine interface {
	Step(relocation.Event) ([]relocation.Action, error)
	// WakeAtMs is when a Tick is next due (0: none).
	WakeAtMs() int64
}

// loop is the one run loop of both sides: it executes the machine's
// actions in order and feeds it events — the results of its actions, what
// the goroutines of the run queue (frames received, async results), ticks,
// a stop, and the driver's wake-ups — until the machine finished.
type loop struct {
	clock clock.Clock
	// tick is the longest time between two Ticks: the machine asks for
	// the ones it needs (WakeAtMs); this one brings what only a Tick
	// carries (a target's drain state) and repeats a Stop.
	tick   time.Duration
	report Reporter
	phase  func() string
	exec   func(relocation.Action) []relocation.Event

	queue queue[relocation.Event] // events from the run's goroutines
	async sync.WaitGroup          // async actions in flight
	done  bool                    // the machine finished (Finish was executed)
}

// inputs are what wakes a loop besides its queue.
type inputs struct {
	// tick is the Tick event for now.
	tick func(now time.Time) relocation.Event
	// stop becomes Stop, ctxDone Stop{Hard}; either is repeated at every
	// tick until the machine finished.
	stop, ctxDone <-chan struct{}
	// wake, when set, returns a channel that fires at the next change
	// worth a look (nil: no look wanted now), and look the events the
	// change gives now (none: nothing new).
	wake func() <-chan struct{}
	look func() []relocation.Event
}

// spawn runs f in a goroutine of the loop's and queues its event.
func (l *loop) spawn(f func() relocation.Event) {
	l.async.Add(1)
	go func() {
		defer l.async.Done()
		l.queue.push(f())
	}()
}

func (l *loop) run(m machine, first []relocation.Action, in inputs) {
	pending := first
	step := func(ev relocation.Event) {
		out, err := m.Step(ev)
		if err != nil {
			l.report.Failed(err)
		}
		pending = append(pending, out...)
	}
	timer := l.clock.NewTimer(l.tick)
	defer timer.Stop()
	last := ""
	var stopped *relocation.Stop // repeated at every tick once set
	for {
		for len(pending) > 0 {
			a := pending[0]
			pending = pending[1:]
			for _, ev := range l.exec(a) {
				step(ev)
			}
		}
		if p := l.phase(); p != last && !l.done {
			l.report.Phase(p)
			last = p
		}
		if l.done {
			return
		}
		var wake <-chan struct{}
		if in.wake != nil {
			// The channel first, then the look: a change between them
			// closes the channel, so none is missed.
			if wake = in.wake(); wake != nil {
				if evs := in.look(); len(evs) > 0 {
					for _, ev := range evs {
						step(ev)
					}
					continue
				}
			}
		}
		next := l.tick
		if w := m.WakeAtMs(); w > 0 {
			next = min(next, max(time.UnixMilli(w).Sub(l.clock.Now()), 0))
		}
		timer.Reset(next)
		select {
		case <-l.queue.ready:
			// The machine reads the time from Ticks only: it hears now
			// first, so what it starts for these events (a grace period,
			// a wait) counts from their arrival, not from the last tick.
			step(in.tick(l.clock.Now()))
			for _, ev := range l.queue.take() {
				step(ev)
			}
		case now := <-timer.C():
			step(in.tick(now))
			if stopped != nil {
				step(*stopped)
			}
		case <-in.stop:
			in.stop = nil
			if stopped == nil {
				stopped = &relocation.Stop{}
			}
			step(*stopped)
		case <-in.ctxDone:
			in.ctxDone = nil
			stopped = &relocation.Stop{Hard: true}
			step(*stopped)
		case <-wake:
		}
	}
}

// queue is an unbounded queue of events: a goroutine that delivers one
// never blocks, and none is dropped.
type queue[T any] struct {
	mu    sync.Mutex
	evs   []T
	ready chan struct{} // a token while events are queued
	once  sync.Once
}

func (q *queue[T]) init() { q.once.Do(func() { q.ready = make(chan struct{}, 1) }) }

func (q *queue[T]) push(ev T) {
	q.init()
	q.mu.Lock()
	q.evs = append(q.evs, ev)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *queue[T]) take() []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	evs := q.evs
	q.evs = nil
	return evs
}
