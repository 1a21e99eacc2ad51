// Package rotor names a verification workload's objects so that objects
// whose state grows with every write stay small in long runs.
package rotor

import (
	"fmt"
	"sync"
)

// Rotor names a workload's objects: slot i's object is <prefix><i>, then
// <prefix><i>.1, <prefix><i>.2… each time Every writes were acknowledged to
// the current one (Every 0: never). Objects whose state grows with every
// write (list items, the bank's ledger) then stay small in long runs: every
// read returns the whole state, and the history keeps every read.
type Rotor struct {
	typ, prefix string
	every       int

	mu     sync.Mutex
	epoch  []int
	writes []int
	all    []string
}

// New is a rotor of n slots of objects of type typ.
func New(typ, prefix string, n, every int) *Rotor {
	r := &Rotor{typ: typ, prefix: prefix, every: every, epoch: make([]int, n), writes: make([]int, n)}
	for i := range n {
		r.all = append(r.all, r.name(i, 0))
	}
	return r
}

func (r *Rotor) name(slot, epoch int) string {
	if epoch == 0 {
		return fmt.Sprintf("actor/%s/%s%d", r.typ, r.prefix, slot)
	}
	return fmt.Sprintf("actor/%s/%s%d.%d", r.typ, r.prefix, slot, epoch)
}

// Current is slot's object now.
func (r *Rotor) Current(slot int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.name(slot, r.epoch[slot])
}

// Wrote counts an acknowledged write to obj (slot's object at epoch) and
// moves the slot on when it is due.
func (r *Rotor) Wrote(slot int, obj string) {
	if r.every <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.name(slot, r.epoch[slot]) != obj {
		return
	}
	r.writes[slot]++
	if r.writes[slot] >= r.every {
		r.writes[slot] = 0
		r.epoch[slot]++
		r.all = append(r.all, r.name(slot, r.epoch[slot]))
	}
}

// Objects is every object used so far.
func (r *Rotor) Objects() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.all...)
}

// Lazy is a workload's rotor, made on first use (Objects may be asked
// before Run).
type Lazy struct {
	once sync.Once
	rot  *Rotor
}

func (l *Lazy) Get(typ, prefix string, n, every int) *Rotor {
	l.once.Do(func() { l.rot = New(typ, prefix, n, every) })
	return l.rot
}
