package reminders

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node/durable"
	"github.com/meshloc/meshloc/pkg/reminder"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// TestFiringCarriesTheSleepingRecord: a firing of a sleeping object
// carries the record its firer read (Seen), so that the node waking it
// need not read again; a firing of an awake object, or of a name without
// a record, carries none, and Seen names only the firing's own object. A
// firing whose reply the sleeping object persisted already is answered as
// a replay and not sent.
func TestFiringCarriesTheSleepingRecord(t *testing.T) {
	srv := etcdtest.Single(t)
	c := etcdtest.Client(t, srv.Endpoint())
	keys := keyspace.Default()
	store := authority.New(c, keys)
	cache := authority.NewCache(c, keys)
	ctx := context.Background()

	g, err := c.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Put(ctx, keys.Owner("a"), `{"ownerId":"a"}`, clientv3.WithLease(g.ID))
	if err != nil {
		t.Fatal(err)
	}
	a := authority.OwnerRef{ID: "a", Generation: resp.Header.Revision}
	activate := func(obj keyspace.Object) authority.Snapshot {
		res, err := store.Activate(ctx, authority.ActivateRequest{Object: obj, Owner: a, Node: authority.NodeRef{RoutingID: "00", Address: "a:1"}})
		if err != nil || !res.Won {
			t.Fatalf("activate %s: %v %+v", obj, err, res)
		}
		return res.Snapshot
	}
	asleep, awake := keyspace.Actor("dcounter", "asleep"), keyspace.Actor("dcounter", "awake")
	if w, err := store.Sleep(ctx, authority.SleepRequest{Seen: activate(asleep), Owner: a}); err != nil || !w.Written {
		t.Fatalf("sleep: %v %+v", err, w)
	}
	activate(awake)

	type sent struct {
		seen  authority.Snapshot
		found bool
		other bool // Seen for another name
	}
	got := map[string]sent{}
	ran := reminder.Due{DueMs: 2, Entry: reminder.Entry{Object: asleep.String(), Name: "r", Seq: 1, Generation: 1}}
	op := actor.ReminderOperationID(ran.Entry.Object, ran.Entry.Name, ran.Entry.Seq, ran.DueMs, ran.AtMs())
	if _, err := c.Put(ctx, keys.StateReplies(asleep)+durable.ReplyID(op), "{}"); err != nil {
		t.Fatal(err)
	}
	fire := Firer(Caller{Cache: cache, Store: store, RepliesInEtcd: true, Call: func(ctx context.Context, req *pb.CallRequest) *pb.CallReply {
		s, ok := Seen(ctx, req.GetObject())
		_, other := Seen(ctx, "actor/dcounter/else")
		got[req.GetObject()] = sent{s, ok, other}
		return &pb.CallReply{Code: pb.Code_CODE_OK}
	}}, nil)
	for _, obj := range []keyspace.Object{asleep, awake, keyspace.Actor("dcounter", "none")} {
		d := reminder.Due{DueMs: 1, Entry: reminder.Entry{Object: obj.String(), Name: "r", Seq: 1, Generation: 1}}
		rep := fire(ctx, d, 0)
		if obj == keyspace.Actor("dcounter", "none") {
			if rep.GetCode() != pb.Code_CODE_DELETED {
				t.Fatalf("firing of a name without a record: %v", rep)
			}
			continue
		}
		if rep.GetCode() != pb.Code_CODE_OK {
			t.Fatalf("firing of %s: %v", obj, rep)
		}
	}
	if s := got[asleep.String()]; !s.found || !s.seen.Record.Asleep() || s.seen.Object != asleep || s.other {
		t.Fatalf("the firing of a sleeping object carries %+v", s)
	}
	if s := got[awake.String()]; s.found || s.other {
		t.Fatalf("the firing of an awake object carries %+v", s)
	}
	if len(got) != 2 {
		t.Fatalf("sent %d firings, want 2", len(got))
	}
	delete(got, asleep.String())
	if rep := fire(ctx, ran, 0); rep.GetCode() != pb.Code_CODE_OK || !rep.GetReplayed() {
		t.Fatalf("a firing that ran before answered %v", rep)
	}
	if _, sent := got[asleep.String()]; sent {
		t.Fatal("a firing that ran before was sent again")
	}
}
