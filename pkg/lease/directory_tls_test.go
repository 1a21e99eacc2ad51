package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
)

// A directory with RequireTLS leaves out an owner whose descriptor does not
// say it serves TLS, whether listed at load or written later; a plain
// directory lists both.
func TestDirectoryRequireTLS(t *testing.T) {
	c := etcdtest.Client(t, etcdtest.Single(t).Endpoint())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keys := keyspace.Default()
	put := func(id string, tls bool) {
		d := lease.Descriptor{OwnerID: id, RoutingID: "00112233445566778899aabbccddeeff", Address: "127.0.0.1:1", State: lease.StateServing, TLS: tls}
		if _, err := c.Put(ctx, keys.Owner(id), string(d.Encode())); err != nil {
			t.Fatal(err)
		}
	}
	put("secure1", true)
	put("plain1", false)
	tlsOnly, all := lease.NewDirectory(c, keys, lease.RequireTLS()), lease.NewDirectory(c, keys)
	done := make(chan struct{}, 2)
	for _, d := range []*lease.Directory{tlsOnly, all} {
		go func() { _ = d.Run(ctx); done <- struct{}{} }()
		<-d.Ready()
	}
	defer func() { cancel(); <-done; <-done }()
	put("secure2", true)
	put("plain2", false)
	deadline := time.Now().Add(10 * time.Second)
	for len(all.List()) < 4 || len(tlsOnly.List()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("directories: %d and %d owners", len(all.List()), len(tlsOnly.List()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // anything more would show now
	for _, id := range []string{"plain1", "plain2"} {
		if _, ok := tlsOnly.Lookup(id); ok {
			t.Errorf("the TLS-only directory lists %s", id)
		}
		if _, ok := all.Lookup(id); !ok {
			t.Errorf("the plain directory misses %s", id)
		}
	}
	for _, id := range []string{"secure1", "secure2"} {
		if _, ok := tlsOnly.Lookup(id); !ok {
			t.Errorf("the TLS-only directory misses %s", id)
		}
	}
}
