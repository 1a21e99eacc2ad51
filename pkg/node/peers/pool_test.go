package peers

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A connection asked for after the pool closed (a late relocation or
// forward while the node stops) is refused: it would never be closed.
func TestConnPoolRefusesAfterClose(t *testing.T) {
	p := New()
	p.SetLive(map[string]string{"127.0.0.1:1": "n1", "127.0.0.1:2": "n2"})
	if _, err := p.Get("127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if c, err := p.Get("127.0.0.1:2"); status.Code(err) != codes.Unavailable || c != nil || len(p.conns) != 0 {
		t.Fatalf("after close: %v, %v, %d connections", c, err, len(p.conns))
	}
}

// The pool dials only addresses of live owners (etcd's owner directory
// names them), and closes a connection once its address is no live
// owner's, or another owner's: a dead node, or an address a message named,
// is not dialled.
func TestConnPoolDialsOnlyLiveOwners(t *testing.T) {
	p := New()
	defer p.Close()
	if _, err := p.Get("127.0.0.1:1"); status.Code(err) != codes.Unavailable {
		t.Fatalf("before any owner is known: %v, want unavailable", err)
	}
	p.SetLive(map[string]string{"127.0.0.1:1": "n1", "127.0.0.1:2": "n2"})
	for _, a := range []string{"127.0.0.1:1", "127.0.0.1:2"} {
		if _, err := p.Get(a); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Get("10.9.9.9:7100"); status.Code(err) != codes.Unavailable {
		t.Fatalf("an address no owner has: %v, want unavailable", err)
	}
	if closed := p.SetLive(map[string]string{"127.0.0.1:2": "n2"}); closed != 1 || len(p.conns) != 1 {
		t.Fatalf("owner at :1 gone: closed %d, %d connections left; want 1, 1", closed, len(p.conns))
	}
	if _, err := p.Get("127.0.0.1:1"); status.Code(err) != codes.Unavailable {
		t.Fatalf("dead owner's address: %v, want unavailable", err)
	}
	if closed := p.SetLive(map[string]string{"127.0.0.1:2": "n7"}); closed != 1 {
		t.Fatalf("another owner at :2: closed %d, want its connection closed", closed)
	}
}
