package node

import (
	"context"
	"math"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/node/internal/hosted"
)

// An owner that notices (docs/design.md §9.1). The location cache follows every
// authority record; a hosted object whose record names another owner, or
// another object generation, or was deleted, or no longer decodes (written
// behind meshloc's back: a compromised node, a bad restore), at a store version newer than
// the one this node serves it under, was moved by a write this node did not
// make: a relocation's commit that no relocation of this node started, a
// recovery, an operator. Whatever it was, etcd says this node is not the
// owner: the object is fenced at once (no request executed, no reply with
// its fence sent, timers stopped), dropped, logged at error level and counted
// (meshloc_ownership_lost_total). A change this node's own relocation makes is
// settled by that relocation (the object is sealed or hidden meanwhile), so
// only serving objects are judged here.

// watchOwnership follows the cache's changes until ctx ends.
func (n *Node) watchOwnership(ctx context.Context, sub *authority.Subscription) {
	defer n.cache.Unsubscribe(sub)
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.Ready():
			for _, name := range sub.Take() {
				n.checkOwnership(name)
			}
		}
	}
}

// checkOwnership judges one changed record against the object hosted here.
func (n *Node) checkOwnership(name string) {
	n.mu.Lock()
	h := n.objects[name]
	n.mu.Unlock()
	if h == nil {
		return
	}
	e, ok := n.recordSeen(name)
	if !ok {
		// Changed, and no entry: the record went to sleep (the cache
		// keeps nothing of a sleeping object), at a version newer than
		// any this node served under.
		e = authority.Entry{Version: math.MaxInt64}
	}
	h.Mu.Lock()
	judged := h.Mode == hosted.ModeServing && !h.Closed && h.Version > 0 && e.Version > h.Version
	lost := judged && !h.SettlesLocked(e) && (e.Deleted || e.Location.Owner != n.self || e.Location.ObjectGeneration != h.Fence.ObjectGeneration)
	if lost {
		h.Lost = true
	}
	fence := h.Fence
	h.Mu.Unlock()
	if !lost {
		return
	}
	n.unhost(h)
	h.Close()
	if f := n.opts.onLost; f != nil {
		n.work.Go(func() { f(name) })
	}
	if e.Deleted && !e.Corrupt { // deleted by an operator (meshctl delete), or by hand in etcd
		n.metrics.Lifecycle.Deletes.WithLabelValues("dropped").Inc()
		n.log.Info().Str("object", name).Int64("objectGeneration", fence.ObjectGeneration).Int64("revision", e.Version).Msg("record deleted: instance dropped")
		if h.Typ.Durable { // its state too, from a store beside etcd (etcd's went with the record)
			n.work.Go(func() {
				ctx, cancel := context.WithTimeout(n.life, n.cfg.CallTimeout)
				defer cancel()
				if err := n.state.Forget(ctx, h.Object(), fence.ObjectGeneration); err != nil {
					n.log.Warn().Str("object", name).Err(err).Msg("record deleted, but its state not removed: the name's next claim drops it")
				}
			})
		}
		return
	}
	n.metrics.OwnershipLost.Inc()
	ev := n.log.Error().Str("object", name).Str("servedAs", fence.Owner.String()).Int64("objectGeneration", fence.ObjectGeneration).Int64("revision", e.Version)
	if e.Corrupt {
		ev = ev.Bool("corruptRecord", true)
	} else {
		ev = ev.Str("recordOwner", e.Location.Owner.String()).Int64("recordObjectGeneration", e.Location.ObjectGeneration)
	}
	ev.Msg("ownership lost: etcd names another owner of a hosted object that no relocation of this node moved; fenced and dropped")
}
