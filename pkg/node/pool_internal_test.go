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
	p.setLive(map[string]string{"127.0.0.1:1": "n1", "127.0.0.1:2": "n2"})
	if _, err := p.get("127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	p.close()
	if c, err := p.get("127.0.0.1:2"); status.Code(err) != codes.Unavailable || c != nil || len(p.conns) != 0 {
		t.Fatalf("after close: %v, %v, %d connections", c, err, len(p.conns))
	}
}

// The pool dials only addresses of live owners (etcd's owner directory
// names them), and closes a connection once its address is no live
// owner's, or another owner's: a dead node, or an address a message named,
// is not dialled.
func TestConnPoolDialsOnlyLiveOwners(t *testing.T) {
	p := newConnPool()
	defer p.close()
	if _, err := p.get("127.0.0.1:1"); status.Code(err) != codes.Unavailable {
		t.Fatalf("before any owner is known: %v, want unavailable", err)
	}
	p.setLive(map[string]string{"127.0.0.1:1": "n1", "127.0.0.1:2": "n2"})
	for _, a := range []string{"127.0.0.1:1", "127.0.0.1:2"} {
		if _, err := p.get(a); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.get("10.9.9.9:7100"); status.Code(err) != codes.Unavailable {
		t.Fatalf("an address no owner has: %v, want unavailable", err)
	}
	if closed := p.setLive(map[string]string{"127.0.0.1:2": "n2"}); closed != 1 || len(p.conns) != 1 {
		t.Fatalf("owner at :1 gone: closed %d, %d connections left; want 1, 1", closed, len(p.conns))
	}
	if _, err := p.get("127.0.0.1:1"); status.Code(err) != codes.Unavailable {
		t.Fatalf("dead owner's address: %v, want unavailable", err)
	}
	if closed := p.setLive(map[string]string{"127.0.0.1:2": "n7"}); closed != 1 {
		t.Fatalf("another owner at :2: closed %d, want its connection closed", closed)
	}
}
