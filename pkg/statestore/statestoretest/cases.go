package statestoretest

import (
	"testing"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/reminder"
	"github.com/meshloc/meshloc/pkg/statestore"
)

// A first activation finds nothing; what it persists, with its replies,
// is what the next owner restores after its owner died.
func testFreshThenRestore(t *testing.T, e *env) {
	o1, kill := e.owner(t, "n1")
	o2, _ := e.owner(t, "n2")
	obj := keyspace.Actor("dcounter", "fresh")
	s1 := e.activate(t, obj, o1)
	rd := e.load(t, s1, true)
	wantNothing(t, rd)
	v := e.persist(t, s1, rd.StateVersion, write{seq: 1, state: "one", op: op(1)})
	e.persist(t, s1, v, write{seq: 2, state: "two", op: op(2), keep: op(1)})
	kill()
	s2 := e.recover(t, s1, o2)
	rd = e.load(t, s2, false)
	wantState(t, rd, "two", op(1), op(2))
	if rd.Value.Seq != 2 || string(rd.Replies[1].Value.Payload) != "reply-two" {
		t.Fatalf("restored seq %d, reply %+v", rd.Value.Seq, rd.Replies[1])
	}
	e.persist(t, s2, rd.StateVersion, write{seq: 3, state: "three", op: op(3), keep: op(1)})
	wantState(t, e.load(t, s2, false), "three", op(1), op(2), op(3))
}

// A write deletes the replies before the oldest one it keeps; a write
// that keeps none (its table is empty) deletes them all.
func testRepliesEvicted(t *testing.T, e *env) {
	o1, _ := e.owner(t, "n1")
	s := e.activate(t, keyspace.Actor("dcounter", "evict"), o1)
	v := e.load(t, s, true).StateVersion
	v = e.persist(t, s, v, write{seq: 1, state: "a", op: op(1)})
	v = e.persist(t, s, v, write{seq: 2, state: "b", op: op(2), keep: op(1)})
	v = e.persist(t, s, v, write{seq: 3, state: "c", op: op(3), keep: op(2)})
	wantState(t, e.load(t, s, false), "c", op(2), op(3))
	v = e.load(t, s, false).StateVersion
	e.persist(t, s, v, write{seq: 4, state: "d"})
	wantState(t, e.load(t, s, false), "d")
}

// A write at a state version that moved on (a write its writer gave up on
// landed after all) is refused and changes nothing.
func testStaleStateVersion(t *testing.T, e *env) {
	o1, _ := e.owner(t, "n1")
	s := e.activate(t, keyspace.Actor("dcounter", "stale"), o1)
	v0 := e.load(t, s, true).StateVersion
	v1 := e.persist(t, s, v0, write{seq: 1, state: "one", op: op(1)})
	e.persist(t, s, v1, write{seq: 2, state: "two", op: op(2), keep: op(1)})
	res, err := e.store.Persist(e.ctx, request(s, v1, write{seq: 3, state: "lost", op: op(3), keep: op(1)}))
	if err != nil || res.Outcome != authority.PersistStateMoved {
		t.Fatalf("write at a stale state version: %+v %v", res, err)
	}
	wantState(t, e.load(t, s, false), "two", op(1), op(2))
}

// Once a new owner took the object and claimed its state, the old owner
// (paused past its lease) can write no more: its write is superseded,
// names the new owner, and changes nothing.
func testSupersededWriterFenced(t *testing.T, e *env) {
	o1, kill := e.owner(t, "n1")
	o2, _ := e.owner(t, "n2")
	s1 := e.activate(t, keyspace.Actor("dcounter", "fenced"), o1)
	v := e.persist(t, s1, e.load(t, s1, true).StateVersion, write{seq: 1, state: "one", op: op(1)})
	kill()
	s2 := e.recover(t, s1, o2)
	rd := e.load(t, s2, false)
	wantState(t, rd, "one", op(1))
	res, err := e.store.Persist(e.ctx, request(s1, v, write{seq: 2, state: "stale owner", op: op(2), keep: op(1)}))
	if err != nil || res.Outcome != authority.PersistSuperseded {
		t.Fatalf("old owner's write: %+v %v", res, err)
	}
	if !res.Found || res.Current.Record.Owner != o2 {
		t.Fatalf("old owner's write was not sent to the new owner: %+v", res)
	}
	e.persist(t, s2, rd.StateVersion, write{seq: 2, state: "two", op: op(2), keep: op(1)})
	wantState(t, e.load(t, s2, false), "two", op(1), op(2))
}

// A deleted object's state never comes back: not to the next object of
// its name, even one recovered before it wrote anything, whether or not
// the store was told to forget it.
func testDeletedStateNeverBack(t *testing.T, e *env) {
	for _, forget := range []bool{false, true} {
		o1, _ := e.owner(t, map[bool]string{false: "n1", true: "n2"}[forget])
		obj := keyspace.Actor("dcounter", map[bool]string{false: "kept", true: "forgotten"}[forget])
		s1 := e.activate(t, obj, o1)
		e.persist(t, s1, e.load(t, s1, true).StateVersion, write{seq: 1, state: "deleted", op: op(1)})
		d, err := e.auth.Delete(e.ctx, authority.DeleteRequest{Seen: s1})
		if err != nil || !d.Deleted {
			t.Fatalf("delete: %+v %v", d, err)
		}
		if forget {
			if err := e.store.Forget(e.ctx, obj, s1.Record.ObjectGeneration); err != nil {
				t.Fatal(err)
			}
		}
		s2 := e.activate(t, obj, o1)
		if s2.Record.Deleted != s1.Record.ObjectGeneration {
			t.Fatalf("new record's deleted generation %d, want %d", s2.Record.Deleted, s1.Record.ObjectGeneration)
		}
		rd := e.load(t, s2, false) // as a recovery would, had its first owner died at once
		wantNothing(t, rd)
		e.persist(t, s2, rd.StateVersion, write{seq: 1, state: "new", op: op(2)})
		wantState(t, e.load(t, s2, false), "new", op(2))
	}
}

// A fresh activation restores nothing that is stored under its name, and
// its first write replaces it, replies included.
func testFreshIgnoresLeftover(t *testing.T, e *env) {
	o1, _ := e.owner(t, "n1")
	s := e.activate(t, keyspace.Actor("dcounter", "leftover"), o1)
	e.persist(t, s, e.load(t, s, true).StateVersion, write{seq: 1, state: "leftover", op: op(1)})
	rd := e.load(t, s, true)
	wantNothing(t, rd)
	e.persist(t, s, rd.StateVersion, write{seq: 1, state: "fresh", op: op(2)})
	wantState(t, e.load(t, s, false), "fresh", op(2))
}

// A write puts the schedule entries of the reminders it sets, in etcd
// whatever the store, and removes the ones its turn fired.
func testSchedule(t *testing.T, e *env) {
	o1, _ := e.owner(t, "n1")
	obj := keyspace.Actor("dcounter", "remind")
	s := e.activate(t, obj, o1)
	def := reminder.Def{Name: "r", Seq: 1, FirstDueMs: 1_000_000}
	a := reminder.Schedule(obj.String(), s.Record.ObjectGeneration, def, 1_000_000)
	b := reminder.Schedule(obj.String(), s.Record.ObjectGeneration, def, 2_000_000)
	v := e.persist(t, s, e.load(t, s, true).StateVersion, write{seq: 1, state: "set", schedule: []reminder.Scheduled{a}})
	if due := e.due(t, a.Shard); len(due) != 1 || due[0] != a.DueMs {
		t.Fatalf("schedule after set: %v", due)
	}
	e.persist(t, s, v, write{seq: 2, state: "fired", op: op(1), schedule: []reminder.Scheduled{b}, drop: []reminder.Scheduled{a}})
	if due := e.due(t, a.Shard); len(due) != 1 || due[0] != b.DueMs {
		t.Fatalf("schedule after the firing: %v, want only %d", due, b.DueMs)
	}
}

// due lists the due times scheduled in shard.
func (e *env) due(t *testing.T, shard int) []int64 {
	t.Helper()
	res, err := e.auth.DueReminders(e.ctx, []reminder.Query{{Shard: shard, ThroughMs: 1 << 50, Limit: 100}})
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, d := range res[0].Due {
		out = append(out, d.DueMs)
	}
	return out
}

// Malformed claims and writes are refused and change nothing.
func testInvalidRequests(t *testing.T, e *env) {
	o1, _ := e.owner(t, "n1")
	s := e.activate(t, keyspace.Actor("dcounter", "bad"), o1)
	v := e.persist(t, s, e.load(t, s, true).StateVersion, write{seq: 1, state: "kept", op: op(1)})
	bad := []statestore.Claim{
		{},
		{Object: s.Object, Fence: authority.Fence{Owner: o1}},
		{Object: s.Object, Fence: s.Fence(), Deleted: s.Record.ObjectGeneration},
		{Object: s.Object, Fence: s.Fence(), Deleted: -1},
	}
	for i, c := range bad {
		if _, err := e.store.Load(e.ctx, c); !isInvalid(err) {
			t.Errorf("claim %d (%+v): %v, want an invalid request", i, c, err)
		}
	}
	reqs := []authority.PersistRequest{
		{},
		func() authority.PersistRequest {
			r := request(s, v, write{seq: 2, state: "x"})
			r.Value, r.State = nil, nil
			return r
		}(),
		func() authority.PersistRequest {
			r := request(s, v, write{seq: 2, state: "x"})
			r.Fence.Owner.Generation = 0
			return r
		}(),
		func() authority.PersistRequest {
			r := request(s, v, write{seq: 2, state: "x", op: "not hex"})
			return r
		}(),
		func() authority.PersistRequest {
			r := request(s, v, write{seq: 2, state: "x"})
			r.Schedule = []reminder.Scheduled{{Shard: -1, DueMs: 1, ID: op(1)}}
			return r
		}(),
	}
	for i, r := range reqs {
		if res, err := e.store.Persist(e.ctx, r); !isInvalid(err) {
			t.Errorf("write %d: %+v %v, want an invalid request", i, res, err)
		}
	}
	wantState(t, e.load(t, s, false), "kept", op(1))
}
