package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// AdminService.WatchEvents: what the node does, streamed to a few
// watchers (locationd's event stream). Each relocation is published twice,
// when it starts and when it ends; the node's counters once a second. The
// cost when nobody watches is one atomic load per relocation start and end.

// Bounds of WatchEvents.
const (
	// MaxEventWatchers is how many WatchEvents streams a node serves at
	// once; one more is refused with resource_exhausted.
	MaxEventWatchers = 8
	// EventWatcherBuffer is how many events wait for one watcher; a watcher
	// that falls that far behind is ended (resource_exhausted): events are
	// never dropped from the middle of a stream.
	EventWatcherBuffer = 4096
	// EventStatsInterval is the interval of NodeStats events.
	EventStatsInterval = time.Second
	// WatchEventsVersion is the stream's version (WatchEventsRequest.version).
	WatchEventsVersion = 1
)

// Errors of WatchEvents.
var (
	// ErrTooManyWatchers: MaxEventWatchers streams are open already.
	ErrTooManyWatchers = wire.Sentinel(pb.Code_CODE_RESOURCE_EXHAUSTED, "node: too many event watchers")
	// ErrWatcherBehind: the watcher did not read EventWatcherBuffer events
	// in time; its stream ended (it may watch again).
	ErrWatcherBehind = wire.Sentinel(pb.Code_CODE_RESOURCE_EXHAUSTED, "node: event watcher fell behind")
	// ErrWatchVersion: a WatchEventsRequest of another version.
	ErrWatchVersion = wire.Sentinel(pb.Code_CODE_INVALID_ARGUMENT, "node: unknown WatchEvents version")
)

// eventHub holds the watchers of one node.
type eventHub struct {
	count atomic.Int32 // watchers, read without the lock on every publish
	mu    sync.Mutex
	subs  map[*watcher]struct{}
}

type watcher struct {
	ch     chan *pb.NodeEvent
	behind chan struct{} // closed once the buffer overflowed
	once   sync.Once
}

// add registers a watcher, or refuses one past MaxEventWatchers.
func (h *eventHub) add() (*watcher, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.subs) >= MaxEventWatchers {
		return nil, fmt.Errorf("%w: %d open (at most %d)", ErrTooManyWatchers, len(h.subs), MaxEventWatchers)
	}
	if h.subs == nil {
		h.subs = map[*watcher]struct{}{}
	}
	w := &watcher{ch: make(chan *pb.NodeEvent, EventWatcherBuffer), behind: make(chan struct{})}
	h.subs[w] = struct{}{}
	h.count.Store(int32(len(h.subs)))
	return w, nil
}

func (h *eventHub) remove(w *watcher) {
	h.mu.Lock()
	delete(h.subs, w)
	h.count.Store(int32(len(h.subs)))
	h.mu.Unlock()
}

// active says whether anyone watches (a publisher skips building the
// event when not).
func (h *eventHub) active() bool { return h.count.Load() > 0 }

// publish gives ev to every watcher; one whose buffer is full is marked
// behind (its stream ends), never waited for.
func (h *eventHub) publish(ev *pb.NodeEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.subs {
		select {
		case w.ch <- ev:
		default:
			w.once.Do(func() { close(w.behind) })
		}
	}
}

// publishRelocation publishes a copy of st, if anyone watches.
func (h *eventHub) publishRelocation(st func() *pb.RelocationStatus) {
	if !h.active() {
		return
	}
	h.publish(&pb.NodeEvent{Event: &pb.NodeEvent_Relocation{Relocation: st()}})
}

// stats are the node's counters now.
func (n *Node) stats() *pb.NodeStats {
	return &pb.NodeStats{
		UnixMs:              n.now().UnixMilli(),
		CallsTotal:          uint64(sumCounter(n.metrics.calls)),
		HostedObjects:       uint32(n.Hosted()),
		RelocationsInFlight: uint32(n.relocs.inFlight("")),
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
	if v := req.GetVersion(); v != WatchEventsVersion {
		return fmt.Errorf("%w: %d (this node speaks %d)", ErrWatchVersion, v, WatchEventsVersion)
	}
	w, err := n.events.add()
	if err != nil {
		return err
	}
	defer n.events.remove(w)
	tick := n.clock.NewTicker(EventStatsInterval)
	defer tick.Stop()
	stats := func() error { return send(&pb.NodeEvent{Event: &pb.NodeEvent_Stats{Stats: n.stats()}}) }
	if err := stats(); err != nil {
		return err
	}
	for {
		select {
		case ev := <-w.ch:
			if err := send(ev); err != nil {
				return err
			}
		case <-tick.C():
			if err := stats(); err != nil {
				return err
			}
		case <-w.behind:
			return fmt.Errorf("%w: %d events unread", ErrWatcherBehind, EventWatcherBuffer)
		case <-n.stopping:
			return fmt.Errorf("%w: %s", ErrStopping, n.self)
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return nil
			}
			return ctx.Err()
		}
	}
}

// cloneStatus copies st for a watcher (the record keeps changing).
func cloneStatus(st *pb.RelocationStatus) *pb.RelocationStatus {
	return proto.Clone(st).(*pb.RelocationStatus)
}
