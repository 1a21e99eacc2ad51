// Package notify owns Changes: "something changed" told to whoever waits
// for it, with no goroutine, no queue, and no allocation while nobody
// waits.
package notify

import "sync"

// Changes wakes its waiters at the next Note. The zero value is ready.
// A waiter that must not miss a change takes Wait under the same lock as
// the state it reads, and the state's writers Note under it too.
type Changes struct {
	mu     sync.Mutex
	ch     chan struct{}
	wanted bool // ch was handed out since the last Note
}

// Wait returns a channel closed at the next Note.
func (c *Changes) Wait() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	c.wanted = true
	return c.ch
}

// Note closes the channel Wait handed out, if it did since the last Note.
func (c *Changes) Note() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.wanted {
		return
	}
	c.wanted = false
	close(c.ch)
	c.ch = nil
}
