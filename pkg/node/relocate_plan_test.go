package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node"
)

// A relocation plans from the record its object serves under, without
// reading etcd, while the location cache has seen no later write of it;
// after one (here the same bytes written again behind the owner's back:
// a newer store version), it reads etcd, and the move still completes.
func TestRelocatePlansFromServedRecord(t *testing.T) {
	m := startMesh(t, 2)
	c := newClient(t, client.Config{Etcd: m.etcd})
	ctx := context.Background()
	const name = "actor/counter/plan"
	if _, err := c.Call(ctx, name, "add", "1"); err != nil {
		t.Fatal(err)
	}
	plans := func(n *node.Node, from string) float64 {
		return m.metricWith(t, n, "meshloc_relocation_plans_total", map[string]string{"from": from})
	}
	move := func(src *node.Node) *node.Node {
		t.Helper()
		st, err := src.Relocate(ctx, name, node.RelocateOptions{})
		if err != nil || st.GetOutcome() != "completed" {
			t.Fatalf("relocate: %v %v", st, err)
		}
		return m.owner(t, name)
	}
	src := m.owner(t, name)
	dst := move(src) // planned from the activation's record
	if got := plans(src, "cache"); got != 1 || plans(src, "etcd") != 0 {
		t.Fatalf("plans at the first source: cache %v etcd %v, want 1 0", got, plans(src, "etcd"))
	}
	back := move(dst) // planned from the commit's record
	if back != src || plans(dst, "cache") != 1 {
		t.Fatalf("plans at the second source: cache %v, want 1", plans(dst, "cache"))
	}

	obj, _ := keyspace.ParseObject(name)
	key := keyspace.Default().Authority(obj)
	r, err := m.etcd.Get(ctx, key)
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("get %s: %v %v", key, r, err)
	}
	put, err := m.etcd.Put(ctx, key, string(r.Kvs[0].Value))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the write to reach the owner's cache", func() bool {
		return src.CachedVersion(name) >= put.Header.Revision
	})
	move(src)
	if got := plans(src, "etcd"); got != 1 {
		t.Fatalf("plans from etcd after a write behind the owner: %v, want 1", got)
	}
	rep, err := c.Call(ctx, name, "get")
	if err != nil || value(t, rep) != 1 {
		t.Fatalf("get after the moves: %v %v", rep, err)
	}
}
