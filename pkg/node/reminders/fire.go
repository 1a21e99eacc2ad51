package reminders

import (
	"context"
	"errors"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
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
type Caller struct {
	Call  func(ctx context.Context, req *pb.CallRequest) *pb.CallReply
	Cache *authority.Cache
	Store *authority.Store
}

// exists reports whether object has a record (awake or asleep). A firing
// is not sent to a name without one: it would create a new object only to
// be told its reminder's object was deleted.
func (c Caller) exists(ctx context.Context, object string) (bool, error) {
	if e, ok := c.Cache.EntryOf(object); ok {
		return !e.Deleted, nil
	}
	obj, err := keyspace.ParseObject(object)
	if err != nil {
		return false, nil
	}
	_, err = c.Store.ReadLocal(ctx, obj)
	if errors.Is(err, authority.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Firer sends firings through c. fresh (a planted bug's seam, nil in
// production) says whether an attempt takes a fresh operation id.
func Firer(c Caller, fresh func(attempt int) bool) func(context.Context, reminder.Due, int) *pb.CallReply {
	return func(ctx context.Context, d reminder.Due, attempt int) *pb.CallReply {
		switch ok, err := c.exists(ctx, d.Entry.Object); {
		case err != nil:
			return &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE, Message: err.Error()}
		case !ok:
			return &pb.CallReply{Code: pb.Code_CODE_DELETED, Message: d.Entry.Object + " has no record"}
		}
		op := actor.ReminderOperationID(d.Entry.Object, d.Entry.Name, d.Entry.Seq, d.DueMs, d.AtMs())
		if fresh != nil && fresh(attempt) {
			op = wire.NewOperationID()
		}
		req := &pb.CallRequest{Version: wire.Version, Object: d.Entry.Object, Method: reminder.Method,
			Args: d.Firing().Args(), OperationId: op[:], KnownObjectGeneration: d.Entry.Generation}
		return c.Call(context.WithValue(ctx, own{}, true), req)
	}
}
