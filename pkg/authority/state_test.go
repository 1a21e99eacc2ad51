package authority_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/tcpproxy"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/reminder"
)

// stateValue is a StateValue of obj written under snap's fence.
func stateValue(snap authority.Snapshot, seq uint64, state string) []byte {
	v := authority.StateValue{V: authority.StateVersion1, Object: snap.Object.String(),
		ObjectGeneration: snap.Record.ObjectGeneration, AuthorityGeneration: snap.Record.AuthorityGeneration,
		Owner: snap.Record.Owner, Seq: seq, State: []byte(state), ReplyWindowMs: 60000, ReplyMaxEntries: 4096}
	return v.Encode()
}

func persistReq(snap authority.Snapshot, stateVersion int64, value []byte) authority.PersistRequest {
	return authority.PersistRequest{Object: snap.Object, Fence: snap.Fence(), StoreVersion: snap.StoreVersion, StateVersion: stateVersion, Value: value}
}

// readState returns the persisted state bytes and version (fails the test on error).
func readState(t *testing.T, s *authority.Store, obj keyspace.Object) (string, int64) {
	t.Helper()
	r, err := s.ReadState(context.Background(), obj)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Found {
		return "", r.StateVersion
	}
	return string(r.Value.State), r.StateVersion
}

// The persist transaction is fenced three ways: by the authority record's
// store version (a stale owner cannot write), by the owner key (a fenced
// owner cannot write), and by the state key's version (a write nobody
// expects is noticed). A write that did not happen says why, with the
// current record, and changes nothing.
func TestPersistStateFenced(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	src, lid := owner(t, c, "src", 30)
	dst, _ := owner(t, c, "dst", 30)
	obj := keyspace.Actor("dcounter", "c")
	seen := activate(t, s, obj, src)

	if got, v := readState(t, s, obj); got != "" || v != 0 {
		t.Fatalf("state before any write: %q at %d", got, v)
	}
	// First write: the key does not exist (state version 0).
	r, err := s.PersistState(ctx, persistReq(seen, 0, stateValue(seen, 1, "one")))
	if err != nil || r.Outcome != authority.PersistWritten || r.StateVersion <= seen.StoreVersion {
		t.Fatalf("first persist: %+v %v", r, err)
	}
	v1 := r.StateVersion
	// The next one compares the version it wrote.
	r, err = s.PersistState(ctx, persistReq(seen, v1, stateValue(seen, 2, "two")))
	if err != nil || r.Outcome != authority.PersistWritten {
		t.Fatalf("second persist: %+v %v", r, err)
	}
	v2 := r.StateVersion
	if got, v := readState(t, s, obj); got != "two" || v != v2 {
		t.Fatalf("state %q at %d, want two at %d", got, v, v2)
	}

	t.Run("stale state version", func(t *testing.T) {
		r, err := s.PersistState(ctx, persistReq(seen, v1, stateValue(seen, 3, "stale")))
		if err != nil || r.Outcome != authority.PersistStateMoved || r.StateVersion != v2 || !r.Found {
			t.Fatalf("persist from state version %d: %+v %v, want state-moved at %d", v1, r, err, v2)
		}
		if got, _ := readState(t, s, obj); got != "two" {
			t.Fatalf("a refused write changed the state to %q", got)
		}
	})

	// The owner's own intent rewrites the record (same fence, new store
	// version): the write is refused as moved, and succeeds from the new one.
	w, err := s.Intend(ctx, authority.IntentRequest{Seen: seen, Source: src, LeaseID: lid,
		Intent: authority.Intent{RelocationID: "r1", Target: dst, TargetNode: node("dst"), DeadlineMs: 1}})
	if err != nil || !w.Written {
		t.Fatalf("intend: %+v %v", w, err)
	}
	r, err = s.PersistState(ctx, persistReq(seen, v2, stateValue(seen, 3, "three")))
	if err != nil || r.Outcome != authority.PersistMoved || r.Current.StoreVersion != w.Snapshot.StoreVersion {
		t.Fatalf("persist after the intent: %+v %v, want moved to %d", r, err, w.Snapshot.StoreVersion)
	}
	r, err = s.PersistState(ctx, persistReq(r.Current, v2, stateValue(seen, 3, "three")))
	if err != nil || r.Outcome != authority.PersistWritten {
		t.Fatalf("persist from the intent's store version: %+v %v", r, err)
	}
	v3 := r.StateVersion

	// The commit moves the object to dst: src is a stale owner now.
	cres, err := s.Commit(ctx, authority.CommitRequest{RelocationID: "r1", Participants: []authority.Participant{{Expected: w.Snapshot}}, Target: dst, TargetNode: node("dst")})
	if err != nil || !cres.Committed {
		t.Fatalf("commit: %+v %v", cres, err)
	}
	committed := cres.Records[obj.String()]
	r, err = s.PersistState(ctx, persistReq(w.Snapshot, v3, stateValue(w.Snapshot, 4, "by the stale owner")))
	if err != nil || r.Outcome != authority.PersistSuperseded || r.Current.Record.Owner != dst {
		t.Fatalf("stale owner's persist: %+v %v, want superseded by %v", r, err, dst)
	}
	if got, _ := readState(t, s, obj); got != "three" {
		t.Fatalf("a stale owner's write changed the state to %q", got)
	}
	// The new owner writes from the commit's store version and the state
	// version it reads.
	sv, err := s.ReadStateVersion(ctx, obj)
	if err != nil || sv != v3 {
		t.Fatalf("state version %d %v, want %d", sv, err, v3)
	}
	r, err = s.PersistState(ctx, persistReq(committed, sv, stateValue(committed, 1, "by dst")))
	if err != nil || r.Outcome != authority.PersistWritten {
		t.Fatalf("new owner's first persist: %+v %v", r, err)
	}
	if got, _ := readState(t, s, obj); got != "by dst" {
		t.Fatalf("state %q", got)
	}
}

// An owner whose lease is gone cannot write, even before anyone recovered
// the object; after a recovery its write is superseded.
func TestPersistStateOwnerGone(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	dead, lid := owner(t, c, "n1", 30)
	live, _ := owner(t, c, "n2", 30)
	obj := keyspace.Actor("dlist", "l")
	seen := activate(t, s, obj, dead)
	r, err := s.PersistState(ctx, persistReq(seen, 0, stateValue(seen, 1, "a")))
	if err != nil || r.Outcome != authority.PersistWritten {
		t.Fatalf("persist: %+v %v", r, err)
	}
	v1 := r.StateVersion
	if _, err := c.Revoke(ctx, lid); err != nil {
		t.Fatal(err)
	}
	r, err = s.PersistState(ctx, persistReq(seen, v1, stateValue(seen, 2, "b")))
	if err != nil || r.Outcome != authority.PersistOwnerGone {
		t.Fatalf("persist by a revoked owner: %+v %v, want owner-gone", r, err)
	}
	rec, err := s.Recover(ctx, authority.RecoverRequest{Seen: seen, NewOwner: live, Node: node("n2")})
	if err != nil || !rec.Written {
		t.Fatalf("recover: %+v %v", rec, err)
	}
	r, err = s.PersistState(ctx, persistReq(seen, v1, stateValue(seen, 2, "b")))
	if err != nil || r.Outcome != authority.PersistSuperseded || r.Current.Record.Owner != live {
		t.Fatalf("persist after the recovery: %+v %v, want superseded", r, err)
	}
	if got, v := readState(t, s, obj); got != "a" || v != v1 {
		t.Fatalf("state %q at %d, want a at %d", got, v, v1)
	}
}

// A persist whose reply is lost is recognised by reading back exactly its
// value; one that was refused is recognised as not written, with its reason.
func TestPersistStateReplyLostResolvedByReadBack(t *testing.T) {
	srv := etcdtest.Single(t)
	direct := etcdtest.Client(t, srv.Endpoint())
	px, err := tcpproxy.New("127.0.0.1:0", srv.Endpoint()[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	viaProxy := etcdtest.Client(t, "http://"+px.Addr())
	s := authority.New(direct, keys)
	sp := authority.New(viaProxy, keys)
	o, _ := owner(t, direct, "n1", 60)

	for _, tc := range []struct {
		name  string
		stale bool
		want  authority.PersistOutcome
	}{{"written", false, authority.PersistWritten}, {"refused", true, authority.PersistStateMoved}} {
		t.Run(tc.name, func(t *testing.T) {
			obj := keyspace.Actor("dcounter", tc.name)
			seen := activate(t, s, obj, o)
			r, err := s.PersistState(context.Background(), persistReq(seen, 0, stateValue(seen, 1, "before")))
			if err != nil || r.Outcome != authority.PersistWritten {
				t.Fatal(r, err)
			}
			sv := r.StateVersion
			if tc.stale {
				sv-- // another version: the compare fails
			}
			req := persistReq(seen, sv, stateValue(seen, 2, "after"))
			if _, err := sp.Read(context.Background(), obj); err != nil { // warm the proxied connection
				t.Fatal(err)
			}
			px.SetMode(tcpproxy.DropReplies)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			_, err = sp.PersistState(ctx, req)
			cancel()
			if !errors.Is(err, authority.ErrUncertain) {
				t.Fatalf("lost reply: err = %v, want ErrUncertain", err)
			}
			px.SetMode(tcpproxy.Forward)
			px.ResetConns()
			for range 50 { // the proxied client reconnects
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				r, err = sp.ResolvePersist(ctx, req)
				cancel()
				if err == nil {
					break
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Outcome != tc.want || !r.Resolved {
				t.Fatalf("resolved %+v, want %v", r, tc.want)
			}
			want := "after"
			if tc.stale {
				want = "before"
			}
			if got, _ := readState(t, s, obj); got != want {
				t.Fatalf("state %q, want %q", got, want)
			}
		})
	}
}

// Bad requests are refused before anything is sent; bad stored values are
// refused when read.
func TestPersistStateBadInput(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	o, _ := owner(t, c, "n1", 30)
	obj := keyspace.Actor("dcounter", "bad")
	seen := activate(t, s, obj, o)
	good := persistReq(seen, 0, stateValue(seen, 1, "x"))
	for name, mut := range map[string]func(*authority.PersistRequest){
		"object":        func(r *authority.PersistRequest) { r.Object = keyspace.Actor("d counter", "x") },
		"owner":         func(r *authority.PersistRequest) { r.Fence.Owner.ID = "" },
		"owner gen":     func(r *authority.PersistRequest) { r.Fence.Owner.Generation = 0 },
		"generations":   func(r *authority.PersistRequest) { r.Fence.ObjectGeneration = 0 },
		"store version": func(r *authority.PersistRequest) { r.StoreVersion = 0 },
		"state version": func(r *authority.PersistRequest) { r.StateVersion = -1 },
		"empty value":   func(r *authority.PersistRequest) { r.Value = nil },
		"reply id": func(r *authority.PersistRequest) {
			r.Reply, r.KeepRepliesFrom = &authority.StateReply{ID: "XYZ"}, "XYZ"
		},
		"keep id": func(r *authority.PersistRequest) { r.KeepRepliesFrom = strings.Repeat("A", 32) },
		"reply not kept": func(r *authority.PersistRequest) {
			r.Reply, r.KeepRepliesFrom = &authority.StateReply{ID: replyID(1)}, replyID(2)
		},
		"reply, nothing kept": func(r *authority.PersistRequest) { r.Reply = &authority.StateReply{ID: replyID(1)} },
	} {
		req := good
		mut(&req)
		if _, err := s.PersistState(ctx, req); !errors.Is(err, authority.ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", name, err)
		}
	}
	if got, v := readState(t, s, obj); got != "" || v != 0 {
		t.Fatalf("refused requests wrote %q at %d", got, v)
	}

	for name, val := range map[string]string{
		"not json":      "{",
		"version":       `{"v":2,"object":"actor/dcounter/bad","objectGeneration":1,"authorityGeneration":1,"owner":{"id":"n1","generation":1},"seq":1,"state":"","replyWindowMs":1,"replyMaxEntries":1,"replyWatermarkMs":0}`,
		"unknown field": `{"v":1,"x":1}`,
		"other object":  string(stateValue(authority.Snapshot{Object: keyspace.Actor("dcounter", "other"), Record: seen.Record}, 1, "x")),
		"reply bounds":  `{"v":1,"object":"actor/dcounter/bad","objectGeneration":1,"authorityGeneration":1,"owner":{"id":"n1","generation":1},"seq":1,"state":"","replyWindowMs":0,"replyMaxEntries":1,"replyWatermarkMs":0}`,
		"generation":    `{"v":1,"object":"actor/dcounter/bad","objectGeneration":0,"authorityGeneration":1,"owner":{"id":"n1","generation":1},"seq":1,"state":"","replyWindowMs":1,"replyMaxEntries":1,"replyWatermarkMs":0}`,
	} {
		if _, err := c.Put(ctx, keys.State(obj), val); err != nil {
			t.Fatal(err)
		}
		r, err := s.ReadState(ctx, obj)
		if !errors.Is(err, authority.ErrInvalidState) || r.Found || r.StateVersion == 0 {
			t.Errorf("%s: %+v %v, want ErrInvalidState with its version", name, r, err)
		}
	}
	// A good value with a bad reply key or value.
	if _, err := c.Put(ctx, keys.State(obj), string(stateValue(seen, 1, "x"))); err != nil {
		t.Fatal(err)
	}
	for name, kv := range map[string][2]string{
		"reply key":   {keys.StateReplies(obj) + "nothex", `{"code":1}`},
		"reply value": {keys.StateReplies(obj) + replyID(1), `{"code":1,"extra":2}`},
	} {
		if _, err := c.Put(ctx, kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ReadState(ctx, obj); !errors.Is(err, authority.ErrInvalidState) {
			t.Errorf("%s: %v, want ErrInvalidState", name, err)
		}
		if _, err := c.Delete(ctx, kv[0]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ReadState(ctx, keyspace.Actor("", "x")); !errors.Is(err, authority.ErrInvalidRequest) {
		t.Errorf("bad object: %v", err)
	}
}

// Every outcome has a name (logs and metrics use it).
func TestPersistOutcomeString(t *testing.T) {
	seen := map[string]bool{}
	for o := authority.PersistWritten; o <= authority.PersistNotWritten; o++ {
		s := o.String()
		if seen[s] || s == fmt.Sprintf("PersistOutcome(%d)", int(o)) {
			t.Errorf("outcome %d named %q", int(o), s)
		}
		seen[s] = true
	}
	if got := authority.PersistOutcome(0).String(); got != "PersistOutcome(0)" {
		t.Errorf("zero outcome named %q", got)
	}
}

// replyID is a valid reply id sorting by i.
func replyID(i int) string { return fmt.Sprintf("%032x", i) }

// The replies of the persisted changes are keys of their own, written with
// the state in its transaction; each write deletes the ones older than the
// oldest the writer keeps.
func TestPersistStateReplies(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	o, _ := owner(t, c, "n1", 30)
	obj := keyspace.Actor("dlist", "r")
	seen := activate(t, s, obj, o)
	sv := int64(0)
	write := func(seq uint64, reply int, keep int) {
		t.Helper()
		req := persistReq(seen, sv, stateValue(seen, seq, fmt.Sprint(seq)))
		if reply > 0 {
			req.Reply = &authority.StateReply{ID: replyID(reply), Value: authority.ReplyValue{Code: 1, Payload: []byte(fmt.Sprintf(`{"n":%d}`, reply))}}
		}
		if keep > 0 {
			req.KeepRepliesFrom = replyID(keep)
		}
		r, err := s.PersistState(ctx, req)
		if err != nil || r.Outcome != authority.PersistWritten {
			t.Fatalf("persist %d: %+v %v", seq, r, err)
		}
		sv = r.StateVersion
	}
	ids := func() []string {
		t.Helper()
		r, err := s.ReadState(ctx, obj)
		if err != nil || !r.Found {
			t.Fatalf("read: %+v %v", r, err)
		}
		var out []string
		for _, rp := range r.Replies {
			out = append(out, rp.ID)
		}
		return out
	}
	write(1, 1, 1)
	write(2, 2, 1)
	write(3, 3, 1)
	if got, want := ids(), []string{replyID(1), replyID(2), replyID(3)}; !slices.Equal(got, want) {
		t.Fatalf("replies %v, want %v", got, want)
	}
	write(4, 4, 3) // the table evicted 1 and 2
	if got, want := ids(), []string{replyID(3), replyID(4)}; !slices.Equal(got, want) {
		t.Fatalf("replies %v, want %v", got, want)
	}
	r, _ := s.ReadState(ctx, obj)
	if r.Replies[1].Value.Code != 1 || string(r.Replies[1].Value.Payload) != `{"n":4}` {
		t.Fatalf("reply value %+v", r.Replies[1].Value)
	}
	write(5, 0, 0) // a timer fire with an empty table: every reply goes
	if got := ids(); len(got) != 0 {
		t.Fatalf("replies %v, want none", got)
	}
	// A refused write writes no reply either.
	req := persistReq(seen, sv-1, stateValue(seen, 6, "6"))
	req.Reply, req.KeepRepliesFrom = &authority.StateReply{ID: replyID(6)}, replyID(6)
	if r, err := s.PersistState(ctx, req); err != nil || r.Outcome != authority.PersistStateMoved {
		t.Fatalf("stale write: %+v %v", r, err)
	}
	if got := ids(); len(got) != 0 {
		t.Fatalf("a refused write left replies %v", got)
	}
	if req.Size() <= len(req.Value) {
		t.Fatalf("size %d of a write with a reply", req.Size())
	}
}

// A persist writes its schedule changes in its own transaction: the
// entries it schedules put, those its turn fired removed, and a key both
// put and removed put once (etcd refuses a transaction that writes a key
// twice). A bad entry is refused and nothing is written.
func TestPersistStateSchedule(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	o, _ := owner(t, c, "n1", 30)
	obj := keyspace.Actor("dcounter", "rem")
	seen := activate(t, s, obj, o)
	def := reminder.Def{Name: "r", Seq: 1, FirstDueMs: 1000, PeriodMs: 1000}
	first := reminder.Schedule(obj.String(), seen.Record.ObjectGeneration, def, 1000)
	req := persistReq(seen, 0, stateValue(seen, 1, "x"))
	req.Schedule = []reminder.Scheduled{first}
	r, err := s.PersistState(ctx, req)
	if err != nil || r.Outcome != authority.PersistWritten {
		t.Fatalf("persist scheduling: %+v %v", r, err)
	}
	// The firing of due time 1000: its entry removed, the next one put;
	// a key both put and removed is put.
	done, next, _ := reminder.After(obj.String(), seen.Record.ObjectGeneration, def, 1000)
	other := reminder.Schedule(obj.String(), seen.Record.ObjectGeneration, reminder.Def{Name: "o", Seq: 2, FirstDueMs: 5000}, 5000)
	req = persistReq(seen, r.StateVersion, stateValue(seen, 2, "y"))
	req.Schedule, req.Unschedule = []reminder.Scheduled{next, other}, []reminder.Scheduled{done, {Shard: other.Shard, DueMs: other.DueMs, ID: other.ID}}
	if r, err = s.PersistState(ctx, req); err != nil || r.Outcome != authority.PersistWritten {
		t.Fatalf("persist of a firing: %+v %v", r, err)
	}
	resp, err := c.Get(ctx, keys.RemindersPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, kv := range resp.Kvs {
		got = append(got, string(kv.Key))
	}
	want := []string{keys.Reminder(next.Shard, next.DueMs, next.ID), keys.Reminder(other.Shard, other.DueMs, other.ID)}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("schedule %q, want %q", got, want)
	}
	for name, bad := range map[string]reminder.Scheduled{
		"shard": {Shard: reminder.Shards, DueMs: 1, ID: done.ID}, "due": {Shard: 1, DueMs: 0, ID: done.ID}, "id": {Shard: 1, DueMs: 1, ID: "x"},
	} {
		req := persistReq(seen, r.StateVersion, stateValue(seen, 3, "z"))
		req.Unschedule = []reminder.Scheduled{bad}
		if _, err := s.PersistState(ctx, req); !errors.Is(err, authority.ErrInvalidRequest) {
			t.Errorf("unschedule with a bad %s: %v, want ErrInvalidRequest", name, err)
		}
	}
	if got, _ := readState(t, s, obj); got != "y" {
		t.Fatalf("refused requests wrote %q", got)
	}
}

// DueReminders reads a shard's entries from FromMs through ThroughMs,
// earliest first, at most Limit; a removed entry is not read; a bad query
// is refused.
func TestDueRemindersRange(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	obj := "actor/dcounter/due"
	shard := reminder.ShardOf(obj)
	var ids []string
	for i, due := range []int64{1000, 2000, 3000, 4000} {
		e := reminder.Schedule(obj, 1, reminder.Def{Name: fmt.Sprintf("r%d", i), Seq: 1, FirstDueMs: due}, due)
		if _, err := c.Put(ctx, keys.Reminder(shard, due, e.ID), string(e.Value)); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.ID)
	}
	if _, err := c.Delete(ctx, keys.Reminder(shard, 2000, ids[1])); err != nil {
		t.Fatal(err)
	}
	rs, err := s.DueReminders(ctx, []reminder.Query{
		{Shard: shard, ThroughMs: 3000, Limit: 10},
		{Shard: shard, FromMs: 1500, ThroughMs: 4000, Limit: 10},
		{Shard: shard, FromMs: 3000, ThroughMs: 4000, Limit: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	dues := func(r reminder.Result) (out []int64) {
		for _, d := range r.Due {
			out = append(out, d.DueMs)
		}
		return out
	}
	for i, want := range [][]int64{{1000, 3000}, {3000, 4000}, {3000}} {
		if got := dues(rs[i]); !slices.Equal(got, want) || len(rs[i].Bad) != 0 {
			t.Errorf("query %d: due %v (bad %v), want %v", i, got, rs[i].Bad, want)
		}
	}
	for _, q := range []reminder.Query{{Shard: shard, FromMs: 5, ThroughMs: 4, Limit: 1}, {Shard: shard, FromMs: -1, ThroughMs: 4, Limit: 1}, {Shard: -1, ThroughMs: 4, Limit: 1}} {
		if _, err := s.DueReminders(ctx, []reminder.Query{q}); !errors.Is(err, authority.ErrInvalidRequest) {
			t.Errorf("query %+v: %v, want ErrInvalidRequest", q, err)
		}
	}
}

// EncodedLen is the length of Encode's output, without the encoding.
func TestStateValueEncodedLen(t *testing.T) {
	for _, st := range [][]byte{nil, {}, []byte("x"), []byte("two"), bytes.Repeat([]byte{0xff}, 1000)} {
		v := authority.StateValue{V: authority.StateVersion1, Object: "actor/dcounter/a", ObjectGeneration: 1, AuthorityGeneration: 2,
			Owner: authority.OwnerRef{ID: "n1", Generation: 3}, Seq: 9, State: st, Timers: []byte("t"), ReplyWindowMs: 1000}
		if got, want := v.EncodedLen(), len(v.Encode()); got != want {
			t.Errorf("state of %d bytes (nil %v): EncodedLen %d, Encode %d", len(st), st == nil, got, want)
		}
	}
}
