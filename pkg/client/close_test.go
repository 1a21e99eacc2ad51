package client

import (
	"context"
	"errors"
	"testing"
)

// A call after Close fails at once with ErrClosed and opens no connection
// (one opened then would never be closed).
func TestCallAfterClose(t *testing.T) {
	c, err := New(context.Background(), Config{Nodes: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(context.Background(), "actor/counter/c1", "get"); !errors.Is(err, ErrClosed) || len(c.conns) != 0 {
		t.Fatalf("call after Close: %v, %d connections", err, len(c.conns))
	}
}
