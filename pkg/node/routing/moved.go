package routing

import (
	"sync"
	"time"
)

// Moved remembers, for a bounded window, where objects that left this node
// went, so stragglers are forwarded instead of bounced (docs/design.md §4
// step 7). Entries expire in the order they were made (every one lives the
// same window), so a FIFO of them finds the expired ones at its front:
// forgetting costs O(1) per move however many objects left in the window
// (a drain moves 100,000).
type Moved struct {
	window time.Duration
	mu     sync.Mutex
	to     map[string]movedEntry
	order  []movedName // oldest first; an entry made again later is stale here
}

type movedEntry struct {
	addr  string
	until time.Time
}

type movedName struct {
	name  string
	until time.Time
}

// NewMoved remembers each move for window.
func NewMoved(window time.Duration) *Moved { return &Moved{window: window} }

// Remember notes at now that object name moved to addr.
func (m *Moved) Remember(name, addr string, now time.Time) {
	until := now.Add(m.window)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.to == nil {
		m.to = map[string]movedEntry{}
	}
	m.expireLocked(now)
	m.to[name] = movedEntry{addr: addr, until: until}
	m.order = append(m.order, movedName{name: name, until: until})
}

// expireLocked forgets the entries whose window ended by now.
func (m *Moved) expireLocked(now time.Time) {
	i := 0
	for ; i < len(m.order) && now.After(m.order[i].until); i++ {
		o := m.order[i]
		if e, ok := m.to[o.name]; ok && e.until.Equal(o.until) {
			delete(m.to, o.name) // not made again since
		}
	}
	clear(m.order[:i]) // the names may go: append copies only what is left
	m.order = m.order[i:]
}

// To is where object name went, while its window lasts at now.
func (m *Moved) To(name string, now time.Time) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.to[name]
	if !ok || now.After(e.until) {
		return "", false
	}
	return e.addr, true
}

// Len is how many moves are remembered (expired ones included until the
// next Remember forgets them).
func (m *Moved) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.to)
}
