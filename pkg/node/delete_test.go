package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Tests of delete (docs/developing/lifecycle.md).

// etcdKeys counts the keys etcd holds for obj: its record, and its state
// and persisted replies.
func (m *mesh) etcdKeys(t *testing.T, obj string) (record, state int64) {
	t.Helper()
	o, err := keyspace.ParseObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k := keyspace.Default()
	r, err := m.etcd.Get(ctx, k.Authority(o), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.etcd.Get(ctx, k.State(o), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	rs, err := m.etcd.Get(ctx, k.StateReplies(o), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return r.Count, s.Count + rs.Count
}

// TestObjectDeletesItself: a request that calls Context.Delete is answered
// once its object's record, state and replies are gone; a caller that knew
// the object is told CODE_DELETED (nothing executed), and calls after that,
// or from a caller that never knew it, get a new object of a larger
// generation, starting empty.
func TestObjectDeletesItself(t *testing.T) {
	m := startMesh(t, 2)
	knew := newClient(t, client.Config{Nodes: m.addrs()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, obj := range []string{"actor/dcounter/d1", "actor/counter/m1"} {
		t.Run(obj, func(t *testing.T) {
			if r, err := knew.Call(ctx, obj, "add", "5"); err != nil || value(t, r) != 5 {
				t.Fatalf("add: %v", err)
			}
			before := wire.NewOperationID() // made before the delete, by a caller that never learns the object
			r, err := knew.Call(ctx, obj, "delete")
			if err != nil || value(t, r) != 5 {
				t.Fatalf("delete: %v", err)
			}
			// Operations made in the delete's millisecond count as made
			// before it; the calls below are made after.
			time.Sleep(2 * time.Millisecond)
			gen := r.Fence.ObjectGeneration
			if rec, state := m.etcdKeys(t, obj); rec != 0 || state != 0 {
				t.Fatalf("after the delete etcd holds %d record and %d state keys", rec, state)
			}
			_, err = knew.Call(ctx, obj, "add", "1")
			if c := durableCode(err); c != pb.Code_CODE_DELETED {
				t.Fatalf("a caller that knew it: %v (code %v), want CODE_DELETED", err, c)
			}
			fresh := newClient(t, client.Config{Nodes: m.addrs()})
			if _, err := fresh.CallID(ctx, before, obj, "add", "1"); durableCode(err) != pb.Code_CODE_DELETED {
				t.Fatalf("an operation made before the delete: %v, want CODE_DELETED (not run on the new object)", err)
			}
			r, err = fresh.Call(ctx, obj, "get")
			if err != nil || value(t, r) != 0 || r.Fence.ObjectGeneration <= gen {
				t.Fatalf("a new caller: %v %+v, want 0 under a generation above %d", err, r, gen)
			}
			// The caller told it was deleted knows the new object now.
			if r, err = knew.Call(ctx, obj, "add", "1"); err != nil || value(t, r) != 1 {
				t.Fatalf("the first caller, after it learnt: %v", err)
			}
		})
	}
	ended := 0.0
	for _, n := range m.nodes {
		ended += m.metricWith(t, n, "meshloc_deletes_total", map[string]string{"how": "ended"})
	}
	if ended != 2 {
		t.Fatalf("meshloc_deletes_total{how=ended} = %v, want 2", ended)
	}
}

// TestDeletedFromOutside: an operator's delete (one transaction on the
// record alone, as locationd makes it) makes the owner drop the instance;
// the next call of a caller that knew it is told CODE_DELETED.
func TestDeletedFromOutside(t *testing.T) {
	m := startMesh(t, 1)
	c := newClient(t, client.Config{Nodes: m.addrs()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const obj = "actor/dcounter/o1"
	if _, err := c.Call(ctx, obj, "add", "7"); err != nil {
		t.Fatal(err)
	}
	res, err := authority.New(m.etcd, keyspace.Default()).Delete(ctx, authority.DeleteRequest{Seen: m.record(t, obj)})
	if err != nil || !res.Deleted {
		t.Fatalf("delete: %v %+v", err, res)
	}
	waitUntil(t, 10*time.Second, "the instance dropped", func() error {
		if v := m.metricWith(t, m.nodes[0], "meshloc_deletes_total", map[string]string{"how": "dropped"}); v != 1 {
			return fmt.Errorf("meshloc_deletes_total{how=dropped} = %v", v)
		}
		return nil
	})
	_, err = c.Call(ctx, obj, "get")
	if code := durableCode(err); code != pb.Code_CODE_DELETED {
		t.Fatalf("after the delete: %v, want CODE_DELETED", err)
	}
	r, err := c.Call(ctx, obj, "get")
	if err != nil || value(t, r) != 0 {
		t.Fatalf("the new object: %v", err)
	}
	if v := m.metric(t, m.nodes[0], "meshloc_ownership_lost_total"); v != 0 {
		t.Fatalf("a delete counted as ownership lost (%v)", v)
	}
}

// TestDeleteRefusedInGroup: a group's member cannot delete itself; the
// request fails and changes nothing.
func TestDeleteRefusedInGroup(t *testing.T) {
	m := startMesh(t, 1)
	c := newClient(t, client.Config{Nodes: m.addrs()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	makeGroup(t, m.nodes[0], "group/gd", "actor/counter/g1")
	if _, err := c.Call(ctx, "actor/counter/g1", "add", "2"); err != nil {
		t.Fatal(err)
	}
	_, err := c.Call(ctx, "actor/counter/g1", "delete")
	if code := durableCode(err); code != pb.Code_CODE_CONFLICT {
		t.Fatalf("delete of a member: %v, want CODE_CONFLICT", err)
	}
	if r, err := c.Call(ctx, "actor/counter/g1", "get"); err != nil || value(t, r) != 2 {
		t.Fatalf("after the refusal: %v", err)
	}
}
