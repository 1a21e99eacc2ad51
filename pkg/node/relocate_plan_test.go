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

	m.rewriteRecord(t, name, src)
	move(src)
	if got := plans(src, "etcd"); got != 1 {
		t.Fatalf("plans from etcd after a write behind the owner: %v, want 1", got)
	}
	rep, err := c.Call(ctx, name, "get")
	if err != nil || value(t, rep) != 1 {
		t.Fatalf("get after the moves: %v %v", rep, err)
	}
}

// A group's relocation plans the same way: from the group's record as the
// location cache holds it and each member's as it serves, without reading
// etcd; after a write of a member's record behind its owner it reads etcd.
// Either way the group moves whole.
func TestGroupRelocationPlansFromCache(t *testing.T) {
	m := startMesh(t, 2)
	c := newClient(t, client.Config{Etcd: m.etcd})
	ctx := context.Background()
	n1 := m.nodes[0]
	const group = "group/plan"
	members := []string{"actor/counter/gp1", "actor/counter/gp2", "actor/counter/gp3"}
	makeGroup(t, n1, group, members...)
	for _, name := range members {
		if _, err := c.Call(ctx, name, "add", "1"); err != nil {
			t.Fatal(err)
		}
	}
	plans := func(n *node.Node, from string) float64 {
		return m.metricWith(t, n, "meshloc_relocation_plans_total", map[string]string{"from": from})
	}
	move := func(src *node.Node) {
		t.Helper()
		st, err := src.Relocate(ctx, group, node.RelocateOptions{})
		if err != nil || st.GetOutcome() != "completed" {
			t.Fatalf("relocate %s: %v %v", group, st, err)
		}
	}
	move(n1)
	if got := plans(n1, "cache"); got != 1 || plans(n1, "etcd") != 0 {
		t.Fatalf("plans of the group's first move: cache %v etcd %v, want 1 0", got, plans(n1, "etcd"))
	}
	n2 := m.owner(t, members[0])
	// Back and forth at once: each target took the group's record as the
	// commit wrote it when it admitted the members (no wait for the watch).
	move(n2)
	move(n1)
	if plans(n2, "cache") != 1 || plans(n1, "cache") != 2 || plans(n1, "etcd")+plans(n2, "etcd") != 0 {
		t.Fatalf("plans of the moves back and forth: cache %v and %v, etcd %v and %v, want 2 1 0 0",
			plans(n1, "cache"), plans(n2, "cache"), plans(n1, "etcd"), plans(n2, "etcd"))
	}
	// The group's record written again behind its owner: the cache sees
	// the write whole (it keeps groups' records), so the move still plans
	// from it, at the new store version, and completes.
	m.rewriteRecord(t, group, n2)
	cached := plans(n2, "cache")
	move(n2)
	if got := plans(n2, "cache"); got != cached+1 {
		t.Fatalf("plans from the cache after a group write it saw: %v, want %v", got, cached+1)
	}
	// A member's record written behind its owner: the record it serves
	// under is older than the cache's, so the move reads etcd.
	m.rewriteRecord(t, members[1], n1)
	move(n1)
	if got := plans(n1, "etcd"); got != 1 {
		t.Fatalf("plans from etcd after a member write behind the owner: %v, want 1", got)
	}
	move(n2)
	for _, name := range members {
		if m.owner(t, name) != n1 {
			t.Fatalf("%s did not move with its group", name)
		}
		if r, err := c.Call(ctx, name, "get"); err != nil || value(t, r) != 1 {
			t.Fatalf("%s after the moves: %v %v", name, r, err)
		}
	}
}

// rewriteRecord writes the record of the object named name again behind
// its owner (the same bytes: a newer store version) and waits until n's
// location cache has seen the write.
func (m *mesh) rewriteRecord(t *testing.T, name string, n *node.Node) {
	t.Helper()
	ctx := context.Background()
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
	waitFor(t, 10*time.Second, "the write to reach the cache", func() bool {
		return n.CachedVersion(name) >= put.Header.Revision
	})
}
