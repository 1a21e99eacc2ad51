package node

import (
	"context"
	"maps"
	"slices"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/node/internal/hosted"
)

// sweep runs the hosted objects' periodic work (hosted.Env.Sweep): reply
// tables pruned, idle objects put to sleep; and forgets the gateway fences
// of objects asleep (routing.Fences.Retain).
func (n *Node) sweep(ctx context.Context) {
	var types []actor.Type
	for _, name := range n.reg.Names() {
		if t, err := n.reg.Lookup(name); err == nil && n.hosts[name] {
			types = append(types, t)
		}
	}
	cached := func(name string) bool { _, ok := n.cache.EntryOf(name); return ok }
	n.env.Sweep(ctx, n.hostedObjects, hosted.SleepTick(types, n.cfg.SleepAfter), func() { n.fences.Retain(cached) })
}

// hostedObjects lists the objects hosted now.
func (n *Node) hostedObjects() []*hosted.Object {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Collect(maps.Values(n.objects))
}
