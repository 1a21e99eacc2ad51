package authority_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// TestDeleteRemovesEverything: one delete removes the record, the state
// and every persisted reply of its object (and nothing of a neighbour whose
// name it prefixes); the next activation takes a larger generation and
// carries the deleted mark.
func TestDeleteRemovesEverything(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	a, _ := owner(t, c, "a", 30)
	b, _ := owner(t, c, "b", 30)
	obj, near := keyspace.Actor("dcounter", "c1"), keyspace.Actor("dcounter", "c10")
	snap := activate(t, s, obj, a)
	activate(t, s, near, a)
	for _, k := range []string{keys.State(obj), keys.StateReplies(obj) + "01", keys.StateReplies(obj) + "02", keys.State(near), keys.StateReplies(near) + "01"} {
		if _, err := c.Put(ctx, k, "x"); err != nil {
			t.Fatal(err)
		}
	}

	if _, err := s.Delete(ctx, authority.DeleteRequest{Seen: snap, By: b}); !errors.Is(err, authority.ErrInvalidRequest) {
		t.Fatalf("delete by a non-owner: %v, want ErrInvalidRequest", err)
	}
	res, err := s.Delete(ctx, authority.DeleteRequest{Seen: snap, By: a})
	if err != nil || !res.Deleted {
		t.Fatalf("delete: %v %+v", err, res)
	}
	for _, k := range []string{keys.Authority(obj), keys.State(obj)} {
		if got, _ := c.Get(ctx, k); got.Count != 0 {
			t.Fatalf("%s left", k)
		}
	}
	if got, _ := c.Get(ctx, keys.StateReplies(obj), clientv3.WithPrefix(), clientv3.WithCountOnly()); got.Count != 0 {
		t.Fatalf("%d replies left", got.Count)
	}
	if got, _ := c.Get(ctx, keys.State(near), clientv3.WithPrefix(), clientv3.WithCountOnly()); got.Count != 2 {
		t.Fatalf("the neighbour lost keys: %d left of 2", got.Count)
	}
	if _, err := s.Read(ctx, obj); !errors.Is(err, authority.ErrNotFound) {
		t.Fatalf("read after delete: %v", err)
	}
	// The same delete again (a retry): found gone, and the catalog says
	// this generation was deleted.
	if res, err := s.Delete(ctx, authority.DeleteRequest{Seen: snap}); err != nil || !res.Deleted || res.Found {
		t.Fatalf("repeated delete: %v %+v", err, res)
	}
	again := activate(t, s, obj, b)
	if r := again.Record; r.ObjectGeneration != 2 || r.Deleted != 1 || r.DeletedAtMs <= 0 {
		t.Fatalf("the next object: generation %d, deleted %d; want 2 and 1", r.ObjectGeneration, r.Deleted)
	}
	// An old snapshot deletes nothing, and says what is there now.
	if res, err := s.Delete(ctx, authority.DeleteRequest{Seen: snap}); err != nil || res.Deleted || !res.Found || res.Snapshot.Record.ObjectGeneration != 2 {
		t.Fatalf("stale delete: %v %+v", err, res)
	}
	// An operator deletes the second one; the third carries the newer mark.
	if res, err := s.Delete(ctx, authority.DeleteRequest{Seen: again}); err != nil || !res.Deleted {
		t.Fatalf("operator delete: %v %+v", err, res)
	}
	if r := activate(t, s, obj, a).Record; r.ObjectGeneration != 3 || r.Deleted != 2 {
		t.Fatalf("the third object: generation %d, deleted %d; want 3 and 2", r.ObjectGeneration, r.Deleted)
	}
}

// TestDeleteSleepingAndRecovered: a sleeping object is deleted by an
// operator; a recovered object keeps the deleted mark of its name.
func TestDeleteSleepingAndRecovered(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	a, _ := owner(t, c, "a", 30)
	obj := keyspace.Actor("counter", "s1")
	snap := activate(t, s, obj, a)
	w, err := s.Sleep(ctx, authority.SleepRequest{Seen: snap, Owner: a})
	if err != nil || !w.Written {
		t.Fatalf("sleep: %v %+v", err, w)
	}
	if res, err := s.Delete(ctx, authority.DeleteRequest{Seen: w.Snapshot}); err != nil || !res.Deleted {
		t.Fatalf("delete of a sleeping object: %v %+v", err, res)
	}
	b, lb := owner(t, c, "b", 30)
	next := activate(t, s, obj, b)
	if _, err := c.Revoke(ctx, lb); err != nil {
		t.Fatal(err)
	}
	a2, _ := owner(t, c, "a2", 30)
	rec, err := s.Recover(ctx, authority.RecoverRequest{Seen: next, NewOwner: a2, Node: node("a2")})
	if err != nil || !rec.Written {
		t.Fatalf("recover: %v %+v", err, rec)
	}
	if r := rec.Snapshot.Record; r.ObjectGeneration != 3 || r.Deleted != 1 {
		t.Fatalf("recovered: generation %d, deleted %d; want 3 and 1", r.ObjectGeneration, r.Deleted)
	}
	// The deleted mark survives the recovery's catalog write.
	if res, err := s.Delete(ctx, authority.DeleteRequest{Seen: rec.Snapshot}); err != nil || !res.Deleted {
		t.Fatalf("delete: %v %+v", err, res)
	}
	if r := activate(t, s, obj, a2).Record; r.ObjectGeneration != 4 || r.Deleted != 3 {
		t.Fatalf("after: generation %d, deleted %d; want 4 and 3", r.ObjectGeneration, r.Deleted)
	}
}

// TestDeleteRefusals: groups, members, relocating records and a dead
// owner's own delete change nothing.
func TestDeleteRefusals(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	a, la := owner(t, c, "a", 30)
	b, _ := owner(t, c, "b", 30)
	g := activate(t, s, keyspace.Group("g1"), a)
	if _, err := s.Delete(ctx, authority.DeleteRequest{Seen: g}); !errors.Is(err, authority.ErrNotDeletable) {
		t.Fatalf("delete of a group: %v, want ErrNotDeletable", err)
	}
	obj := keyspace.Actor("counter", "r1")
	snap := activate(t, s, obj, a)
	w, err := s.Intend(ctx, authority.IntentRequest{Seen: snap, Source: a, Intent: authority.Intent{
		RelocationID: "r-1", Target: b, TargetNode: node("b"), DeadlineMs: 1}})
	if err != nil || !w.Written {
		t.Fatalf("intend: %v %+v", err, w)
	}
	if _, err := s.Delete(ctx, authority.DeleteRequest{Seen: w.Snapshot}); !errors.Is(err, authority.ErrNotDeletable) {
		t.Fatalf("delete of a relocating object: %v, want ErrNotDeletable", err)
	}
	other := activate(t, s, keyspace.Actor("counter", "r2"), a)
	if _, err := c.Revoke(ctx, la); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Delete(ctx, authority.DeleteRequest{Seen: other, By: a}); err != nil || res.Deleted || !res.Found {
		t.Fatalf("delete by a dead owner: %v %+v", err, res)
	}
}

// TestCacheRelistDropsDeleted: a record deleted while the cache did not
// watch (a relist after a watch error) is gone from the cache after the
// relist, as a deletion: its owner learns it (a subscriber is offered the
// name); the others stay.
func TestCacheRelistDropsDeleted(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	a, _ := owner(t, c, "a", 30)
	gone, kept := keyspace.Actor("counter", "gone"), keyspace.Actor("counter", "kept")
	snap := activate(t, s, gone, a)
	activate(t, s, kept, a)
	cache := authority.NewCache(c, keys)
	if _, err := authority.LoadCache(ctx, cache); err != nil {
		t.Fatal(err)
	}
	sub := cache.Subscribe(func(string) bool { return true })
	defer cache.Unsubscribe(sub)
	if res, err := s.Delete(ctx, authority.DeleteRequest{Seen: snap}); err != nil || !res.Deleted {
		t.Fatalf("delete: %v %+v", err, res)
	}
	if _, err := authority.LoadCache(ctx, cache); err != nil {
		t.Fatal(err)
	}
	if e, ok := cache.EntryOf(gone.String()); !ok || !e.Deleted {
		t.Fatalf("the deleted record after the relist: %+v %v", e, ok)
	}
	if _, ok := cache.Lookup(kept); !ok {
		t.Fatal("the kept record was dropped")
	}
	select {
	case <-sub.Ready():
		if names := sub.Take(); len(names) != 1 || names[0] != gone.String() {
			t.Fatalf("offered %v", names)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the deletion was not offered")
	}
}

// TestDeleteObject: the operator's delete reads and deletes; a second one
// finds nothing; a group is refused.
func TestDeleteObject(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	a, _ := owner(t, c, "a", 30)
	obj := keyspace.Actor("counter", "op1")
	activate(t, s, obj, a)
	b := s.Batched(authority.Limits{})
	snap, res, err := b.DeleteObject(ctx, obj)
	if err != nil || !res.Deleted || snap.Record.Owner != a || snap.Record.ObjectGeneration != 1 {
		t.Fatalf("delete: %v %+v %+v", err, res, snap)
	}
	if _, _, err := b.DeleteObject(ctx, obj); !errors.Is(err, authority.ErrNotFound) {
		t.Fatalf("a second delete: %v, want ErrNotFound", err)
	}
	activate(t, s, keyspace.Group("og"), a)
	if _, _, err := b.DeleteObject(ctx, keyspace.Group("og")); !errors.Is(err, authority.ErrNotDeletable) {
		t.Fatalf("a group: %v, want ErrNotDeletable", err)
	}
}
