package node_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
)

// TestActivationOutlivesItsCaller: first calls whose callers give up at
// once (a deadline of a few milliseconds, inside or after the claim's
// transaction) do not abandon their activations. Every object called again
// is served as the object it was made (never state_lost, as an object whose
// record named this node with nothing in memory would be), and each was
// activated once.
func TestActivationOutlivesItsCaller(t *testing.T) {
	const made = 300
	m := startMesh(t, 1)
	c := newClient(t, client.Config{Nodes: m.addrs()})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range made {
		short, cancelShort := context.WithTimeout(ctx, time.Duration(100+rand.IntN(1400))*time.Microsecond)
		_, _ = c.Call(short, fmt.Sprintf("actor/counter/a%d", i), "get") // it may end either way
		cancelShort()
	}
	for i := range made {
		name := fmt.Sprintf("actor/counter/a%d", i)
		r, err := c.Call(ctx, name, "add", "1")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if v := value(t, r); v != 1 {
			t.Fatalf("%s = %d after one add", name, v)
		}
	}
	if v := m.metric(t, m.nodes[0], "meshloc_activations_total"); v != made {
		t.Fatalf("meshloc_activations_total = %v, want %d", v, made)
	}
	if v := m.metric(t, m.nodes[0], "meshloc_hosted_objects"); v != made {
		t.Fatalf("meshloc_hosted_objects = %v, want %d", v, made)
	}
}

// TestSlowClaimOutlivesItsCaller: with etcd slower than the caller's
// deadline, the caller gives up while the object is activating, and the
// activation still ends: the object is hosted, activated once, and its
// first served call finds it new (the abandoned call was never run).
func TestSlowClaimOutlivesItsCaller(t *testing.T) {
	m, px := cuttableMesh(t)
	n1 := m.add(t, "n1", func(_ int, c *node.Config) { c.EtcdEndpoints = []string{"http://" + px.Addr()} })
	c := newClient(t, client.Config{Nodes: []string{n1.Address()}})
	px.SetDelay(300 * time.Millisecond) // each etcd round trip of n1 takes 0.6 s
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := c.Call(short, "actor/counter/slow", "add", "1")
	cancel()
	if err == nil {
		t.Fatal("a call within 200 ms of a node 0.6 s from etcd succeeded")
	}
	waitUntil(t, 20*time.Second, "the activation to end", func() error {
		if h := m.metric(t, n1, "meshloc_hosted_objects"); h != 1 {
			return fmt.Errorf("n1 hosts %v", h)
		}
		return nil
	})
	px.SetDelay(0)
	r, err := c.Call(context.Background(), "actor/counter/slow", "add", "1")
	if err != nil || value(t, r) != 1 {
		t.Fatalf("the first served add: %v", err)
	}
	if v := m.metric(t, n1, "meshloc_activations_total"); v != 1 {
		t.Fatalf("meshloc_activations_total = %v, want 1", v)
	}
}
