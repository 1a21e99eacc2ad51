package node

import (
	"context"

	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/node/reminders"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// fireReminders fires the due reminders of this node's schedule shards
// (pkg/node/reminders) until ctx ends, as calls of its own (selfCall).
func (n *Node) fireReminders(ctx context.Context) {
	call := func(ctx context.Context, req *pb.CallRequest) *pb.CallReply {
		return n.Call(context.WithValue(ctx, selfCall{}, true), req)
	}
	reminders.New(reminders.DefaultConfig(n.cfg.DedupWindow), reminders.Deps{
		Clock: n.clock, Store: n.store, Self: n.self.ID, Log: n.log, Sends: n.metrics.Lifecycle.ReminderSends,
		Nodes: func() []string { return lease.ServingIDs(n.dir.List()) },
		Fire:  reminders.Firer(reminders.Caller{Call: call, Cache: n.cache, Store: n.store}, freshReminderOp),
	}).Run(ctx)
}

type selfCall struct{}
