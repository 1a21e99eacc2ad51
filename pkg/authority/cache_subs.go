package authority

import (
	"slices"
	"sync"
)

// Subscription collects the names of the entries the cache changed (from
// the watch, a load or Observe), each name once until taken: its owner
// reads the current location with Lookup. It never blocks the cache and
// holds at most one name per object.
type Subscription struct {
	c       *Cache
	keep    func(name string) bool
	ready   chan struct{} // a token when names are pending
	mu      sync.Mutex
	pending map[string]struct{}
}

// Subscribe starts collecting the changed names that keep accepts (nil:
// every name); Unsubscribe stops it. keep runs outside the cache's lock, so
// it may take its owner's: a node keeps the names it hosts, and a load of a
// million records then costs it nothing but the question.
func (c *Cache) Subscribe(keep func(name string) bool) *Subscription {
	s := &Subscription{c: c, keep: keep, ready: make(chan struct{}, 1), pending: map[string]struct{}{}}
	c.mu.Lock()
	c.subs = append(c.subs, s)
	c.mu.Unlock()
	return s
}

// Unsubscribe stops s collecting.
func (c *Cache) Unsubscribe(s *Subscription) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// A new slice: unlock offers to the one it read under the lock.
	c.subs = slices.DeleteFunc(slices.Clone(c.subs), func(x *Subscription) bool { return x == s })
}

// Ready has a token whenever names are pending.
func (s *Subscription) Ready() <-chan struct{} { return s.ready }

// Take returns the pending names (in no order) and forgets them.
func (s *Subscription) Take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.pending))
	for k := range s.pending {
		out = append(out, k)
	}
	clear(s.pending)
	return out
}

// offer adds the names keep accepts.
func (s *Subscription) offer(names []string) {
	if s.keep != nil {
		var kept []string
		for _, name := range names {
			if s.keep(name) {
				kept = append(kept, name)
			}
		}
		names = kept
	}
	if len(names) == 0 {
		return
	}
	s.mu.Lock()
	for _, name := range names {
		s.pending[name] = struct{}{}
	}
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// unlock releases c.mu, held for writing, and offers the names changed
// meanwhile to the subscriptions, outside the lock.
func (c *Cache) unlock() {
	names, subs := c.offers, c.subs
	c.offers = nil
	c.mu.Unlock()
	if len(names) == 0 {
		return
	}
	for _, s := range subs {
		s.offer(names)
	}
}
