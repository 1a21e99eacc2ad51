package reloclog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshloc/meshloc/pkg/clock"
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

// Hub holds the watchers of one node.
type Hub struct {
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
func (h *Hub) add() (*watcher, error) {
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

func (h *Hub) remove(w *watcher) {
	h.mu.Lock()
	delete(h.subs, w)
	h.count.Store(int32(len(h.subs)))
	h.mu.Unlock()
}

// active says whether anyone watches (a publisher skips building the
// event when not).
func (h *Hub) active() bool { return h.count.Load() > 0 }

// Publish gives ev to every watcher; one whose buffer is full is marked
// behind (its stream ends), never waited for.
func (h *Hub) Publish(ev *pb.NodeEvent) {
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

// PublishRelocation publishes a copy of st, if anyone watches.
func (h *Hub) PublishRelocation(st func() *pb.RelocationStatus) {
	if !h.active() {
		return
	}
	h.Publish(&pb.NodeEvent{Event: &pb.NodeEvent_Relocation{Relocation: st()}})
}

// Source is what a watch reads of its node.
type Source struct {
	// Stats are the node's counters now.
	Stats func() *pb.NodeStats
	Clock clock.Clock
	// Stopping is closed when the node stops; the watch then ends with
	// Stopped().
	Stopping <-chan struct{}
	Stopped  func() error
}

// Watch serves one WatchEvents stream (see the bounds above): the stats
// first, then every event as it comes, until the watcher leaves (ctx), it
// falls behind, or the node stops.
func (h *Hub) Watch(ctx context.Context, req *pb.WatchEventsRequest, send func(*pb.NodeEvent) error, src Source) error {
	if v := req.GetVersion(); v != WatchEventsVersion {
		return fmt.Errorf("%w: %d (this node speaks %d)", ErrWatchVersion, v, WatchEventsVersion)
	}
	w, err := h.add()
	if err != nil {
		return err
	}
	defer h.remove(w)
	tick := src.Clock.NewTicker(EventStatsInterval)
	defer tick.Stop()
	stats := func() error { return send(&pb.NodeEvent{Event: &pb.NodeEvent_Stats{Stats: src.Stats()}}) }
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
		case <-src.Stopping:
			return src.Stopped()
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return nil
			}
			return ctx.Err()
		}
	}
}
