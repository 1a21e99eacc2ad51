package verify

import (
	"fmt"
	"sync"
)

// rotor names a workload's objects: slot i's object is <prefix><i>, then
// <prefix><i>.1, <prefix><i>.2… each time Every writes were acknowledged to
// the current one (Every 0: never). Objects whose state grows with every
// write (list items, the bank's ledger) then stay small in long runs: every
// read returns the whole state, and the history keeps every read.
type rotor struct {
	typ, prefix string
	every       int

	mu     sync.Mutex
	epoch  []int
	writes []int
	all    []string
}

func newRotor(typ, prefix string, n, every int) *rotor {
	r := &rotor{typ: typ, prefix: prefix, every: every, epoch: make([]int, n), writes: make([]int, n)}
	for i := range n {
		r.all = append(r.all, r.name(i, 0))
	}
	return r
}

func (r *rotor) name(slot, epoch int) string {
	if epoch == 0 {
		return fmt.Sprintf("actor/%s/%s%d", r.typ, r.prefix, slot)
	}
	return fmt.Sprintf("actor/%s/%s%d.%d", r.typ, r.prefix, slot, epoch)
}

// current is slot's object now.
func (r *rotor) current(slot int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.name(slot, r.epoch[slot])
}

// wrote counts an acknowledged write to obj (slot's object at epoch) and
// moves the slot on when it is due.
func (r *rotor) wrote(slot int, obj string) {
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

// objects is every object used so far.
func (r *rotor) objects() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.all...)
}

// lazyRotor is a workload's rotor, made on first use (Objects may be asked
// before Run).
type lazyRotor struct {
	once sync.Once
	rot  *rotor
}

func (l *lazyRotor) get(typ, prefix string, n, every int) *rotor {
	l.once.Do(func() { l.rot = newRotor(typ, prefix, n, every) })
	return l.rot
}

// typeOr is a workload's object type: t, or def when t is empty.
func typeOr(t, def string) string {
	if t == "" {
		return def
	}
	return t
}
