package reminders

import (
	"context"
	"errors"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node/durable"
	"github.com/meshloc/meshloc/pkg/reminder"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// own marks a firing's context: the node's own call (Own).
type own struct{}

// Own reports whether ctx is a firing this node sends (the router refuses
// a firing from a client under mutual TLS).
func Own(ctx context.Context) bool { return ctx.Value(own{}) != nil }

// Caller is how a firing reaches its object: the node's router (Call),
// and its records (Cache, then Store) to tell whether the object exists.
// RepliesInEtcd: the state store keeps the persisted replies in etcd
// (the firer then reads whether a sleeping object's firing ran).
type Caller struct {
	Call          func(ctx context.Context, req *pb.CallRequest) *pb.CallReply
	Cache         *authority.Cache
	Store         *authority.Store
	RepliesInEtcd bool
}

// look reports whether object has a record (awake or asleep). A firing
// is not sent to a name without one: it would create a new object only to
// be told its reminder's object was deleted. asleep is the record read when
// it says the object sleeps (nil otherwise): the firing carries it (Seen).
// ran: the object sleeps and its persisted replies hold op's, so the
// firing ran and was persisted before (a backup's, or a send given up on):
// it is answered as a replay without waking the object.
func (c Caller) look(ctx context.Context, object string, op wire.OperationID) (ok bool, asleep *authority.Snapshot, ran bool, err error) {
	if e, ok := c.Cache.EntryOf(object); ok {
		return !e.Deleted, nil, false, nil
	}
	obj, err := keyspace.ParseObject(object)
	if err != nil {
		return false, nil, false, nil
	}
	var snap authority.Snapshot
	if c.RepliesInEtcd {
		snap, ran, err = c.Store.ReadLocalReplied(ctx, obj, durable.ReplyID(op))
	} else {
		snap, err = c.Store.ReadLocal(ctx, obj)
	}
	if errors.Is(err, authority.ErrNotFound) {
		return false, nil, false, nil
	}
	if err != nil {
		return false, nil, false, err
	}
	if !snap.Record.Asleep() {
		return true, nil, false, nil
	}
	return true, &snap, ran, nil
}

// seen marks a firing's context with the sleeping record its firer read.
type seen struct{}

// Seen is the record of object that the firing of ctx read before it was
// sent, if it said the object sleeps. The node waking the object may take
// it for the wake it starts from instead of reading again: a wake compares
// the record's version, so a record changed since (woken, deleted) only
// fails that compare, and the node then reads it. Read serializable, it
// saves a firing of a sleeping object a round to etcd's leader.
func Seen(ctx context.Context, object string) (authority.Snapshot, bool) {
	s, ok := ctx.Value(seen{}).(*authority.Snapshot)
	if !ok || s.Object.String() != object {
		return authority.Snapshot{}, false
	}
	return *s, true
}

// Firer sends firings through c. fresh (a planted bug's seam, nil in
// production) says whether an attempt takes a fresh operation id.
func Firer(c Caller, fresh func(attempt int) bool) func(context.Context, reminder.Due, int) *pb.CallReply {
	return func(ctx context.Context, d reminder.Due, attempt int) *pb.CallReply {
		op := actor.ReminderOperationID(d.Entry.Object, d.Entry.Name, d.Entry.Seq, d.DueMs, d.AtMs())
		if fresh != nil && fresh(attempt) {
			op = wire.NewOperationID()
		}
		ok, asleep, ran, err := c.look(ctx, d.Entry.Object, op)
		switch {
		case err != nil:
			return &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE, Message: err.Error()}
		case !ok:
			return &pb.CallReply{Code: pb.Code_CODE_DELETED, Message: d.Entry.Object + " has no record"}
		case ran:
			return &pb.CallReply{Code: pb.Code_CODE_OK, Replayed: true, Message: d.Entry.Object + " ran this firing before: its reply is persisted"}
		}
		req := &pb.CallRequest{Version: wire.Version, Object: d.Entry.Object, Method: reminder.Method,
			Args: d.Firing().Args(), OperationId: op[:], KnownObjectGeneration: d.Entry.Generation}
		ctx = context.WithValue(ctx, own{}, true)
		if asleep != nil {
			ctx = context.WithValue(ctx, seen{}, asleep)
		}
		return c.Call(ctx, req)
	}
}
