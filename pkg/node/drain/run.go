package drain

import (
	"maps"
	"slices"
	"sync"
)

// Run is one drain; callers that ask while it runs join it.
type Run struct {
	done   chan struct{}
	report *Report
	err    error

	mu   sync.Mutex // serialises the progress callbacks
	subs map[int]func(Event)
	next int
}

// NewRun is a drain about to run.
func NewRun() *Run { return &Run{done: make(chan struct{}), subs: map[int]func(Event){}} }

// Subscribe makes f get every event from now on (nil: nothing).
func (r *Run) Subscribe(f func(Event)) (unsubscribe func()) {
	if f == nil {
		return func() {}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.next
	r.next++
	r.subs[id] = f
	return func() {
		r.mu.Lock()
		delete(r.subs, id)
		r.mu.Unlock()
	}
}

// Emit gives ev to every subscriber, one at a time.
func (r *Run) Emit(ev Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(r.subs)) {
		r.subs[id](ev)
	}
}

// Done is closed when the drain ended (Finish).
func (r *Run) Done() <-chan struct{} { return r.done }

// Finish records the drain's result and ends it.
func (r *Run) Finish(rep *Report, err error) {
	r.report, r.err = rep, err
	close(r.done)
}

// Result is the drain's result, once Done.
func (r *Run) Result() (*Report, error) { return r.report, r.err }
