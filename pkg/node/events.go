package node

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"

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
		CallsTotal:          uint64(sumCounter(n.metrics.Calls)),
		HostedObjects:       uint32(n.Hosted()),
		RelocationsInFlight: uint32(n.relocs.InFlight("")),
	}
}

// sumCounter adds up every series of c.
func sumCounter(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 32)
	go func() { c.Collect(ch); close(ch) }()
	var sum float64
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) == nil && d.GetCounter() != nil {
			sum += d.GetCounter().GetValue()
		}
	}
	return sum
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
