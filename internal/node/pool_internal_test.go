package node

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A connection asked for after the pool closed (a late relocation or
// forward while the node stops) is refused: it would never be closed.
func TestConnPoolRefusesAfterClose(t *testing.T) {
	p := newConnPool()
	if _, err := p.get("127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	p.close()
	if c, err := p.get("127.0.0.1:2"); status.Code(err) != codes.Unavailable || c != nil || len(p.conns) != 0 {
		t.Fatalf("after close: %v, %v, %d connections", c, err, len(p.conns))
	}
}
