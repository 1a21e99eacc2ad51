package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
)

// AwaitServing returns only once the directory has seen the owner, at its
// generation, serving; it ends with an error when the owner's lease ends
// first, and with ctx.
func TestDirectoryAwaitServing(t *testing.T) {
	c := etcdtest.Client(t, etcdtest.Single(t).Endpoint())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keys := keyspace.Default()
	put := func(state lease.NodeState) int64 {
		d := lease.Descriptor{OwnerID: "n1", RoutingID: "00112233445566778899aabbccddeeff", Address: "127.0.0.1:1", State: state}
		resp, err := c.Put(ctx, keys.Owner("n1"), string(d.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	gen := put(lease.StateJoining)
	d := lease.NewDirectory(c, keys)
	done := make(chan struct{})
	go func() { _ = d.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	<-d.Ready()

	waited := make(chan error, 1)
	go func() { waited <- d.AwaitServing(ctx, "n1", gen, nil) }()
	select {
	case err := <-waited:
		t.Fatalf("AwaitServing returned %v while n1 was joining", err)
	case <-time.After(200 * time.Millisecond):
	}
	put(lease.StateServing)
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("AwaitServing still waits after n1 serves")
	}

	ended := make(chan struct{})
	close(ended)
	if err := d.AwaitServing(ctx, "n1", gen+100, ended); err == nil {
		t.Fatal("AwaitServing of a generation never seen, its lease ended: no error")
	}
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	defer stop()
	if err := d.AwaitServing(short, "n1", gen+100, nil); err == nil {
		t.Fatal("AwaitServing past its context: no error")
	}
}
