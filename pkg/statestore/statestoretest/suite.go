// Package statestoretest is the conformance suite every state store
// passes (pkg/statestore): against a real etcd for the records, it drives a
// store the way a node does — claim, load, persist, supersede, delete — and
// checks that an acknowledged change is never lost nor overwritten by an
// owner that was fenced out, and that a deleted object's state never comes
// back.
package statestoretest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/reminder"
	"github.com/meshloc/meshloc/pkg/statestore"
)

// Open makes the store under test for one case, over that case's authority
// store (a new etcd).
type Open func(t *testing.T, auth *authority.Store) statestore.Store

// Run runs every case of the suite against the stores open makes.
func Run(t *testing.T, open Open) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, open)
			c.run(t, e)
		})
	}
}

var cases = []struct {
	name string
	run  func(*testing.T, *env)
}{
	{"FreshThenRestore", testFreshThenRestore},
	{"RepliesEvicted", testRepliesEvicted},
	{"StaleStateVersion", testStaleStateVersion},
	{"SupersededWriterFenced", testSupersededWriterFenced},
	{"DeletedStateNeverBack", testDeletedStateNeverBack},
	{"FreshIgnoresLeftover", testFreshIgnoresLeftover},
	{"Schedule", testSchedule},
	{"InvalidRequests", testInvalidRequests},
}

// env is one case's etcd, records and owners.
type env struct {
	ctx   context.Context
	c     *clientv3.Client
	auth  *authority.Store
	store statestore.Store
}

func newEnv(t *testing.T, open Open) *env {
	srv := etcdtest.Single(t)
	c := etcdtest.Client(t, srv.Endpoint())
	e := &env{ctx: context.Background(), c: c, auth: authority.New(c, keyspace.Default())}
	e.store = open(t, e.auth)
	t.Cleanup(func() { _ = e.store.Close() })
	return e
}

// owner registers a live owner id; revoke ends its lease.
func (e *env) owner(t *testing.T, id string) (o authority.OwnerRef, revoke func()) {
	t.Helper()
	g, err := e.c.Grant(e.ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	k := keyspace.Default().Owner(id)
	resp, err := e.c.Txn(e.ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, `{"ownerId":"`+id+`"}`, clientv3.WithLease(g.ID))).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("owner %s: %v", id, err)
	}
	return authority.OwnerRef{ID: id, Generation: resp.Header.Revision}, func() {
		if _, err := e.c.Revoke(e.ctx, g.ID); err != nil {
			t.Fatal(err)
		}
	}
}

func nodeOf(o authority.OwnerRef) authority.NodeRef {
	return authority.NodeRef{RoutingID: fmt.Sprintf("%032x", len(o.ID)), Address: o.ID + ":7100"}
}

// activate creates obj's record owned by o.
func (e *env) activate(t *testing.T, obj keyspace.Object, o authority.OwnerRef) authority.Snapshot {
	t.Helper()
	res, err := e.auth.Activate(e.ctx, authority.ActivateRequest{Object: obj, Owner: o, Node: nodeOf(o)})
	if err != nil || !res.Won {
		t.Fatalf("activate %s: %v %+v", obj, err, res)
	}
	return res.Snapshot
}

// recover moves seen's object (its owner dead) to o.
func (e *env) recover(t *testing.T, seen authority.Snapshot, o authority.OwnerRef) authority.Snapshot {
	t.Helper()
	w, err := e.auth.Recover(e.ctx, authority.RecoverRequest{Seen: seen, NewOwner: o, Node: nodeOf(o)})
	if err != nil || !w.Written {
		t.Fatalf("recover %s: %v %+v", seen.Object, err, w)
	}
	return w.Snapshot
}

// claim is a new owner's claim of snap's object.
func claim(snap authority.Snapshot, fresh bool) statestore.Claim {
	return statestore.Claim{Object: snap.Object, Fence: snap.Fence(), Deleted: snap.Record.Deleted, Fresh: fresh}
}

// load claims and reads, failing the test on error.
func (e *env) load(t *testing.T, snap authority.Snapshot, fresh bool) authority.StateRead {
	t.Helper()
	c := claim(snap, fresh)
	rd, err := e.store.Load(e.ctx, c)
	if err != nil {
		t.Fatalf("load %s under %v: %v", snap.Object, snap.Fence(), err)
	}
	if w, ok := e.store.(statestore.WithRecord); ok {
		// Loading from a read made with the record's write answers as Load.
		pre, err := e.auth.ReadState(e.ctx, snap.Object)
		if err != nil {
			t.Fatal(err)
		}
		got, err := w.LoadFrom(c, pre)
		want := rd
		got.Revision, want.Revision = 0, 0
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("LoadFrom %s: %v %+v, Load %+v", snap.Object, err, got, want)
		}
	}
	return rd
}

// write is a node's write of state (seq) with reply id op (empty: none),
// keeping the replies from keep.
type write struct {
	seq      uint64
	state    string
	op, keep string
	schedule []reminder.Scheduled
	drop     []reminder.Scheduled
}

// request is w as a PersistRequest under snap at stateVersion.
func request(snap authority.Snapshot, stateVersion int64, w write) authority.PersistRequest {
	v := authority.StateValue{V: authority.StateVersion1, Object: snap.Object.String(),
		ObjectGeneration: snap.Record.ObjectGeneration, AuthorityGeneration: snap.Record.AuthorityGeneration,
		Owner: snap.Record.Owner, Seq: w.seq, State: []byte(w.state), ReplyWindowMs: 60000, ReplyMaxEntries: 4096}
	req := authority.PersistRequest{Object: snap.Object, Fence: snap.Fence(), StoreVersion: snap.StoreVersion,
		StateVersion: stateVersion, Value: v.Encode(), State: &v, KeepRepliesFrom: w.keep, Schedule: w.schedule, Unschedule: w.drop}
	if w.op != "" {
		req.Reply = &authority.StateReply{ID: w.op, Value: authority.ReplyValue{Code: 0, Payload: []byte("reply-" + w.state)}}
		if req.KeepRepliesFrom == "" {
			req.KeepRepliesFrom = w.op
		}
	}
	return req
}

// persist writes w and wants it written; it returns the new state version.
func (e *env) persist(t *testing.T, snap authority.Snapshot, stateVersion int64, w write) int64 {
	t.Helper()
	res, err := e.store.Persist(e.ctx, request(snap, stateVersion, w))
	if err != nil || res.Outcome != authority.PersistWritten {
		t.Fatalf("persist %q under %v at %d: %+v %v", w.state, snap.Fence(), stateVersion, res, err)
	}
	if res.StateVersion == stateVersion {
		t.Fatalf("persist %q: state version still %d", w.state, stateVersion)
	}
	return res.StateVersion
}

// op is a reply id (32 hex digits) sorting by i.
func op(i int) string { return fmt.Sprintf("%032x", i) }

// wantState fails unless rd holds state with the replies ids.
func wantState(t *testing.T, rd authority.StateRead, state string, ids ...string) {
	t.Helper()
	if !rd.Found || string(rd.Value.State) != state {
		t.Fatalf("state: found=%v %q, want %q", rd.Found, rd.Value.State, state)
	}
	if len(rd.Replies) != len(ids) {
		t.Fatalf("replies %+v, want ids %v", rd.Replies, ids)
	}
	for i, id := range ids {
		if rd.Replies[i].ID != id {
			t.Fatalf("reply %d is %s, want %s (replies %+v)", i, rd.Replies[i].ID, id, rd.Replies)
		}
	}
}

// wantNothing fails unless rd found nothing to restore.
func wantNothing(t *testing.T, rd authority.StateRead) {
	t.Helper()
	if rd.Found || len(rd.Replies) > 0 {
		t.Fatalf("found %q with %d replies, want nothing", rd.Value.State, len(rd.Replies))
	}
}

// isInvalid reports whether err is an invalid-request error.
func isInvalid(err error) bool { return errors.Is(err, statestore.ErrInvalidRequest) }
