package notify

import "testing"

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestChanges(t *testing.T) {
	var c Changes
	c.Note() // nobody waits: nothing happens
	a, b := c.Wait(), c.Wait()
	if a != b || closed(a) {
		t.Fatal("two waits before a note share one open channel")
	}
	c.Note()
	if !closed(a) {
		t.Fatal("a note closes the waiters' channel")
	}
	d := c.Wait()
	if closed(d) {
		t.Fatal("a wait after the note waits for the next one")
	}
	c.Note()
	c.Note() // a second note with nobody waiting again: no double close
	if !closed(d) {
		t.Fatal("the next note closes it")
	}
}
