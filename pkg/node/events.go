package node

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	"github.com/meshloc/meshloc/pkg/node/nodemetrics"
	"github.com/meshloc/meshloc/pkg/node/reloclog"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// AdminService.WatchEvents: what the node does, streamed to a few
// watchers (locationd's event stream); pkg/node/reloclog serves it.

// Bounds of WatchEvents.
const (
	MaxEventWatchers   = reloclog.MaxEventWatchers
	EventWatcherBuffer = reloclog.EventWatcherBuffer
	EventStatsInterval = reloclog.EventStatsInterval
	WatchEventsVersion = reloclog.WatchEventsVersion
)

// Errors of WatchEvents.
var (
	ErrTooManyWatchers = reloclog.ErrTooManyWatchers
	ErrWatcherBehind   = reloclog.ErrWatcherBehind
	ErrWatchVersion    = reloclog.ErrWatchVersion
)

// stats are the node's counters now.
func (n *Node) stats() *pb.NodeStats {
	return &pb.NodeStats{
		UnixMs:              n.now().UnixMilli(),
		CallsTotal:          uint64(nodemetrics.Sum(n.metrics.Calls)),
		HostedObjects:       uint32(n.Hosted()),
		RelocationsInFlight: uint32(n.relocs.InFlight("")),
	}
}

// WatchEvents serves AdminService.WatchEvents (see the bounds above): the
// stats first, then every event as it comes, until the watcher leaves, it
// falls behind, or the node stops.
func (s *adminServer) WatchEvents(req *pb.WatchEventsRequest, stream grpc.ServerStreamingServer[pb.NodeEvent]) error {
	return wire.StatusError(s.n.watchEvents(stream.Context(), req, stream.Send))
}

func (n *Node) watchEvents(ctx context.Context, req *pb.WatchEventsRequest, send func(*pb.NodeEvent) error) error {
	return n.events.Watch(ctx, req, send, reloclog.Source{Stats: n.stats, Clock: n.clock, Stopping: n.stopping,
		Stopped: func() error { return fmt.Errorf("%w: %s", ErrStopping, n.self) }})
}
