package node

import (
	"context"

	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/node/reminders"
)

// fireReminders fires the due reminders of this node's schedule shards
// (pkg/node/reminders) until ctx ends, as calls of its own (reminders.Own).
func (n *Node) fireReminders(ctx context.Context) {
	reminders.New(reminders.DefaultConfig(), reminders.Deps{
		Clock: n.clock, Store: n.store, Self: n.self.ID, Log: n.log, Sends: n.metrics.Lifecycle.ReminderSends,
		Nodes: func() []string { return lease.ServingIDs(n.dir.List()) },
		Fire: reminders.Firer(reminders.Caller{Call: n.Call, Cache: n.cache, Store: n.store, RepliesInEtcd: n.env.StateWithRecord()},
			freshReminderOp),
	}).Run(ctx)
}
