package hosted

import (
	"errors"
	"fmt"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Delete asks that the object end after this turn (actor.Context.Delete):
// the turn's driver calls end once the turn is recorded.
func (c *handlerCtx) Delete() error {
	c.h.Mu.Lock()
	seen := c.h.Rec.Snapshot(c.h)
	c.h.Mu.Unlock()
	if err := authority.Deletable(seen.Object, seen.Record); err != nil {
		return fmt.Errorf("%w: %w", actor.ErrNotDeletable, err)
	}
	c.del = true
	return nil
}

// SettlesLocked reports whether the record change e is the outcome of h's
// own sleep or delete in flight, which settles it (not a loss; h.Mu held).
func (h *Object) SettlesLocked(e authority.Entry) bool {
	return (h.Sleeping && e.Location.Asleep()) || (h.Ending && e.Deleted && !e.Corrupt)
}

// endAttempts bounds the deletes of one turn that find the record
// changed but still this owner's, at the same generation (the version h
// serves under was behind etcd's): each tries again from the record read.
const endAttempts = 3

// end deletes h's object after a turn that asked it, recorded already
// (authority.Delete by this owner: record, state and replies in one
// fenced transaction). On the mailbox, before the turn's reply leaves;
// it returns the reply to send instead of the recorded one, or nil.
//
//   - deleted (nil): h is retired; its queued requests retry and find the
//     name free (a new object), or are told CODE_DELETED;
//   - not deleted (the record names another owner or generation, is in a
//     relocation, or this owner's lease is gone): the object lives on and
//     the turn's effect stands; the caller is told so (CODE_CONFLICT);
//   - etcd left the outcome unknown: it may be deleted, so h must not
//     serve on: it is retired, and the caller is told UNAVAILABLE (a
//     retry finds out: it was made before the delete, if there was one).
func (h *Object) end() *pb.CallReply {
	n := h.env
	h.Mu.Lock()
	h.Relocating, h.Ending = true, true // claimed: no relocation starts while etcd decides
	seen := h.Rec.Snapshot(h)
	fence := h.Fence
	h.Mu.Unlock()
	ctx, cancel := n.durableCtx()
	defer cancel()
	var res authority.DeleteResult
	var err error
	for range endAttempts {
		res, err = n.store.Delete(ctx, authority.DeleteRequest{Seen: seen, By: n.self, At: n.now()})
		cur := res.Snapshot.Record
		if err != nil || res.Deleted || !res.Found || cur.Owner != n.self || cur.ObjectGeneration != fence.ObjectGeneration ||
			authority.Deletable(res.Snapshot.Object, cur) != nil {
			break
		}
		seen = res.Snapshot
	}
	switch {
	case err == nil && res.Deleted:
		n.metrics.Lifecycle.Deletes.WithLabelValues("ended").Inc()
		n.log.Info().Str("object", h.name).Int64("objectGeneration", fence.ObjectGeneration).Msg("deleted by its own request")
		if err := n.state.Forget(ctx, h.obj, fence.ObjectGeneration); err != nil { // left for the name's next claim to drop
			n.log.Warn().Str("object", h.name).Err(err).Msg("deleted, but its state not yet removed from the " + n.state.Name() + " state store")
		}
		h.retire(h.name + " was deleted; a retry creates a new object, or is told it was deleted")
		return nil
	case err == nil || errors.Is(err, authority.ErrNotDeletable) || errors.Is(err, authority.ErrInvalidRequest):
		h.Mu.Lock()
		h.Relocating, h.Ending = false, false
		h.Mu.Unlock()
		if res.Found {
			n.cache.Observe(res.Snapshot)
		}
		n.metrics.Lifecycle.Deletes.WithLabelValues("failed").Inc()
		why := fmt.Sprintf("its record changed (now %s, owner %s, object generation %d) or this owner's lease is gone",
			res.Snapshot.Record.State, res.Snapshot.Record.Owner, res.Snapshot.Record.ObjectGeneration)
		if err != nil {
			why = err.Error()
		}
		n.log.Warn().Str("object", h.name).Str("why", why).Msg("not deleted: it lives on")
		return h.Reply(pb.Code_CODE_CONFLICT, nil, fmt.Sprintf("%s was not deleted (%s); the request's other effects stand: call again to delete it", h.name, why))
	default:
		n.metrics.Lifecycle.Deletes.WithLabelValues("failed").Inc()
		n.log.Warn().Str("object", h.name).Err(err).Msg("delete outcome unknown: dropped; the next call finds in etcd whether it was deleted")
		h.retire(h.name + " may have been deleted; a retry finds out")
		return h.Reply(pb.Code_CODE_UNAVAILABLE, nil, fmt.Sprintf("%s may have been deleted (%v): the outcome is unknown", h.name, err))
	}
}
