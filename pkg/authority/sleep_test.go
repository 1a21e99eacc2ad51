package authority_test

import (
	"context"
	"errors"
	"testing"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// TestSleepAndWake: a sleep names no owner and keeps the object generation;
// the wake that follows names the waker; each bumps the authority
// generation, and a write planned from an older snapshot fails.
func TestSleepAndWake(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	a, _ := owner(t, c, "a", 30)
	b, _ := owner(t, c, "b", 30)
	obj := keyspace.Actor("counter", "c1")
	snap := activate(t, s, obj, a)

	if _, err := s.Sleep(ctx, authority.SleepRequest{Seen: snap, Owner: b}); !errors.Is(err, authority.ErrInvalidRequest) {
		t.Fatalf("sleep by a non-owner: %v, want ErrInvalidRequest", err)
	}
	w, err := s.Sleep(ctx, authority.SleepRequest{Seen: snap, Owner: a})
	if err != nil || !w.Written {
		t.Fatalf("sleep: %v %+v", err, w)
	}
	slept, err := s.Read(ctx, obj)
	if err != nil {
		t.Fatal(err)
	}
	r := slept.Record
	if !r.Asleep() || !r.Owner.IsZero() || r.Node != (authority.NodeRef{}) || r.ObjectGeneration != 1 || r.AuthorityGeneration != 2 {
		t.Fatalf("sleeping record: %+v", r)
	}
	if loc := authority.LocationOf(slept); !loc.Asleep() {
		t.Fatalf("location of a sleeping record %+v does not say asleep", loc)
	}
	// A second sleep from the old snapshot, or a recovery, writes nothing.
	if w, err := s.Sleep(ctx, authority.SleepRequest{Seen: snap, Owner: a}); err != nil || w.Written {
		t.Fatalf("stale sleep: %v %+v", err, w)
	}
	if _, err := s.Recover(ctx, authority.RecoverRequest{Seen: slept, NewOwner: b, Node: node("b")}); !errors.Is(err, authority.ErrInvalidRequest) {
		t.Fatalf("recover of a sleeping object: %v, want ErrInvalidRequest", err)
	}
	if _, err := s.Wake(ctx, authority.WakeRequest{Seen: snap, Owner: b, Node: node("b")}); !errors.Is(err, authority.ErrInvalidRequest) {
		t.Fatalf("wake of an active record: %v, want ErrInvalidRequest", err)
	}

	w, err = s.Wake(ctx, authority.WakeRequest{Seen: slept, Owner: b, Node: node("b")})
	if err != nil || !w.Written {
		t.Fatalf("wake: %v %+v", err, w)
	}
	if r := w.Snapshot.Record; r.Owner != b || r.State != authority.StateActive || r.ObjectGeneration != 1 || r.AuthorityGeneration != 3 {
		t.Fatalf("woken record: %+v", r)
	}
	// A racing waker with the same sleeping snapshot loses and learns the winner.
	w, err = s.Wake(ctx, authority.WakeRequest{Seen: slept, Owner: a, Node: node("a")})
	if err != nil || w.Written || !w.Found || w.Snapshot.Record.Owner != b {
		t.Fatalf("second wake: %v %+v", err, w)
	}
}

// TestSleepRefusesGroups: a group and its members never sleep.
func TestSleepRefusesGroups(t *testing.T) {
	c, s := setup(t)
	a, _ := owner(t, c, "a", 30)
	g := activate(t, s, keyspace.Group("g1"), a)
	if _, err := s.Sleep(context.Background(), authority.SleepRequest{Seen: g, Owner: a}); !errors.Is(err, authority.ErrInvalidRequest) {
		t.Fatalf("sleep of a group: %v, want ErrInvalidRequest", err)
	}
	bad := authority.Sleeping(g.Record)
	if err := bad.Validate(); !errors.Is(err, authority.ErrInvalidRecord) {
		t.Fatalf("a sleeping group record validates: %v", err)
	}
}

// TestWakeNeedsLiveOwner: a waker whose key is gone writes nothing.
func TestWakeNeedsLiveOwner(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	a, _ := owner(t, c, "a", 30)
	b, lb := owner(t, c, "b", 30)
	snap := activate(t, s, keyspace.Actor("counter", "c2"), a)
	if w, err := s.Sleep(ctx, authority.SleepRequest{Seen: snap, Owner: a}); err != nil || !w.Written {
		t.Fatalf("sleep: %v %+v", err, w)
	}
	if _, err := c.Revoke(ctx, lb); err != nil {
		t.Fatal(err)
	}
	slept, _ := s.Read(ctx, snap.Object)
	w, err := s.Wake(ctx, authority.WakeRequest{Seen: slept, Owner: b, Node: node("b")})
	if err != nil || w.Written || w.OwnerAlive {
		t.Fatalf("wake by a dead owner: %v %+v", err, w)
	}
}

// TestCacheKeepsNothingOfSleepingObjects: a cache (fed by its watch, or by
// Observe) drops the entry of an object that went to sleep, which no
// longer counts as its former owner's load; the wake brings it back.
func TestCacheKeepsNothingOfSleepingObjects(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	a, _ := owner(t, c, "a", 30)
	obj := keyspace.Actor("counter", "z1")
	snap := activate(t, s, obj, a)
	cache := authority.NewCache(c, keys)
	runCache(t, cache)
	if _, ok := cache.Lookup(obj); !ok || cache.Count("a") != 1 {
		t.Fatalf("active object not cached (count %d)", cache.Count("a"))
	}
	w, err := s.Sleep(ctx, authority.SleepRequest{Seen: snap, Owner: a})
	if err != nil || !w.Written {
		t.Fatalf("sleep: %v %+v", err, w)
	}
	cache.Observe(w.Snapshot)
	if _, ok := cache.Lookup(obj); ok || cache.Count("a") != 0 || cache.Len() != 0 {
		t.Fatalf("sleeping object still cached (count %d, len %d)", cache.Count("a"), cache.Len())
	}
	if _, ok := cache.EntryOf(obj.String()); ok {
		t.Fatal("an entry kept for a sleeping object")
	}
	w, err = s.Wake(ctx, authority.WakeRequest{Seen: w.Snapshot, Owner: a, Node: node("a")})
	if err != nil || !w.Written {
		t.Fatalf("wake: %v %+v", err, w)
	}
	if err := cache.WaitRevision(ctx, w.Snapshot.StoreVersion); err != nil {
		t.Fatal(err)
	}
	if loc, ok := cache.Lookup(obj); !ok || loc.Owner != a || loc.AuthorityGeneration != 3 {
		t.Fatalf("woken object: %+v %v", loc, ok)
	}
}

// TestCacheRemembersSleepersByName: with no entry for a sleeping object,
// the cache still says it may be asleep, whether it was asleep when the
// cache listed the records, went to sleep under its watch, or was observed
// asleep; a name never seen asleep is not (so a first call to it claims a
// new object at once, and a call to a sleeping one reads before it wakes).
func TestCacheRemembersSleepersByName(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	a, _ := owner(t, c, "a", 30)
	sleep := func(name string) authority.WriteResult {
		t.Helper()
		w, err := s.Sleep(ctx, authority.SleepRequest{Seen: activate(t, s, keyspace.Actor("counter", name), a), Owner: a})
		if err != nil || !w.Written {
			t.Fatalf("sleep %s: %v %+v", name, err, w)
		}
		return w
	}
	sleep("listed")
	activate(t, s, keyspace.Actor("counter", "awake"), a)
	cache := authority.NewCache(c, keys)
	runCache(t, cache)
	watched := sleep("watched")
	if err := cache.WaitRevision(ctx, watched.Snapshot.StoreVersion); err != nil {
		t.Fatal(err)
	}
	cache.Observe(sleep("observed").Snapshot)
	for name, want := range map[string]bool{"listed": true, "watched": true, "observed": true, "awake": false, "new": false} {
		obj := keyspace.Actor("counter", name).String()
		if got := cache.MaybeAsleep(obj); got != want {
			t.Errorf("MaybeAsleep(%s) = %v, want %v", obj, got, want)
		}
	}
}

// An activation and a wake asked to read the state (ReadState) answer, in
// their own transaction, what a read after them would: the state key's
// version for an activation, the state and its replies for a wake. A wake
// that lost reads nothing.
func TestActivateAndWakeReadState(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	a, _ := owner(t, c, "a", 30)
	b, _ := owner(t, c, "b", 30)

	// A state key left without a record (a predecessor's): its version.
	left := keyspace.Actor("dcounter", "left")
	put, err := c.Put(ctx, keys.State(left), "left over")
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Activate(ctx, authority.ActivateRequest{Object: left, Owner: a, Node: node("a"), ReadState: true})
	if err != nil || !res.Won || res.State == nil || res.State.StateVersion != put.Header.Revision || res.State.Found {
		t.Fatalf("activate over a left state: %v %+v state %+v, want version %d", err, res, res.State, put.Header.Revision)
	}

	obj := keyspace.Actor("dcounter", "d1")
	res, err = s.Activate(ctx, authority.ActivateRequest{Object: obj, Owner: a, Node: node("a"), ReadState: true})
	if err != nil || !res.Won || res.State == nil || res.State.StateVersion != 0 {
		t.Fatalf("activate: %v %+v state %+v", err, res, res.State)
	}
	snap := res.Snapshot
	req := persistReq(snap, 0, stateValue(snap, 1, "one"))
	req.Reply, req.KeepRepliesFrom = &authority.StateReply{ID: replyID(1), Value: authority.ReplyValue{Code: 1, Payload: []byte(`{"n":1}`)}}, replyID(1)
	if r, err := s.PersistState(ctx, req); err != nil || r.Outcome != authority.PersistWritten {
		t.Fatalf("persist: %v %+v", err, r)
	}
	w, err := s.Sleep(ctx, authority.SleepRequest{Seen: snap, Owner: a})
	if err != nil || !w.Written {
		t.Fatalf("sleep: %v %+v", err, w)
	}
	slept := w.Snapshot
	w, err = s.Wake(ctx, authority.WakeRequest{Seen: slept, Owner: b, Node: node("b"), ReadState: true})
	if err != nil || !w.Written || w.State == nil {
		t.Fatalf("wake: %v %+v", err, w)
	}
	after, err := s.ReadState(ctx, obj)
	if err != nil {
		t.Fatal(err)
	}
	got := *w.State
	if !got.Found || string(got.Value.State) != "one" || got.StateVersion != after.StateVersion ||
		len(got.Replies) != 1 || got.Replies[0].ID != after.Replies[0].ID || got.Revision != w.Snapshot.Revision {
		t.Fatalf("state read by the wake %+v, read after it %+v", got, after)
	}
	w, err = s.Wake(ctx, authority.WakeRequest{Seen: slept, Owner: a, Node: node("a"), ReadState: true})
	if err != nil || w.Written || w.State != nil {
		t.Fatalf("a losing wake: %v %+v", err, w)
	}
}
