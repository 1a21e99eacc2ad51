package hosted

import (
	"errors"
	"fmt"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
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

// end deletes h's object after a turn that asked it, recorded already
// (authority.Delete by this owner: record, state and replies in one
// fenced transaction). On the mailbox, before the turn's reply leaves.
//
//   - deleted: h is retired; its queued requests retry and find the name
//     free (a new object), or are told CODE_DELETED if they knew this one;
//   - the record changed first (a relocation's intent, a recovery) or this
//     owner's lease is gone: nothing was deleted, the object lives on
//     (logged; the turn's effect stands, and its reply leaves);
//   - etcd left the outcome unknown: it may be deleted, so h must not
//     serve on: it is retired, and the next call finds in etcd which.
func (h *Object) end() {
	n := h.env
	h.Mu.Lock()
	h.Relocating, h.Ending = true, true // claimed: no relocation starts while etcd decides
	seen := h.Rec.Snapshot(h)
	h.Mu.Unlock()
	ctx, cancel := n.durableCtx()
	defer cancel()
	res, err := n.store.Delete(ctx, authority.DeleteRequest{Seen: seen, By: n.self})
	switch {
	case err == nil && res.Deleted:
		n.metrics.Lifecycle.Deletes.WithLabelValues("ended").Inc()
		n.log.Info().Str("object", h.name).Int64("objectGeneration", seen.Record.ObjectGeneration).Msg("deleted by its own request")
		h.retire(h.name + " was deleted; a retry creates a new object, or is told it was deleted")
	case err == nil || errors.Is(err, authority.ErrNotDeletable) || errors.Is(err, authority.ErrInvalidRequest):
		h.Mu.Lock()
		h.Relocating, h.Ending = false, false
		h.Mu.Unlock()
		if res.Found {
			n.cache.Observe(res.Snapshot)
		}
		n.log.Warn().Str("object", h.name).Err(err).Msg("not deleted: its record changed first, or this owner's lease is gone; it lives on")
	default:
		n.log.Warn().Str("object", h.name).Err(err).Msg("delete outcome unknown: dropped; the next call finds in etcd whether it was deleted")
		h.retire(h.name + " may have been deleted; a retry finds out")
	}
}
