package locationd

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The event stream (GET /v1/events) is one hub per locationd: its sources
// (an etcd watch of the owner and authority keys, and a WatchEvents stream
// of every live owner: events_sources.go) publish events; each client of
// the stream gets those its filter wants, in order, through a bounded
// buffer. The hub keeps the last ringSize events, so a client that
// reconnects with the id of the last event it saw (Last-Event-ID) misses
// nothing that is still kept. The sources run only while at least one
// client is connected: without a dashboard open, nodes and etcd do no work
// for it.

// ringSize is how many past events the hub keeps for resumes.
const ringSize = 8192

// epochLen is the length of the hub's epoch (hex): ids of another
// locationd, or of this one before a restart, are not resumed.
const epochLen = 16

// errTooManyStreams: Config.Events.MaxStreams streams are open.
var errTooManyStreams = wire.Sentinel(pb.Code_CODE_RESOURCE_EXHAUSTED, "locationd: too many event streams")

// event is one published event: its id's sequence, type, the object it is
// about ("" for none) and its JSON data.
type event struct {
	seq    uint64
	typ    string
	object string
	data   []byte
}

// sseClient is one stream's client.
type sseClient struct {
	f       eventFilter
	ch      chan *event
	dropped chan struct{} // closed when ch overflowed
	once    sync.Once
}

func (c *sseClient) drop() { c.once.Do(func() { close(c.dropped) }) }

// eventHub: see above.
type eventHub struct {
	cfg   EventsConfig
	log   zerolog.Logger
	epoch string
	// start runs the sources until their ctx ends (events_sources.go); nil
	// in tests that publish by hand.
	start func(ctx context.Context, h *eventHub)

	mu      sync.Mutex
	seq     uint64
	ring    []*event // the last ringSize, oldest first once full (head)
	head    int
	clients map[*sseClient]struct{}
	state   map[string]*event // the last event of each state key (publishState)
	closed  bool
	stop    context.CancelFunc // the running sources' (nil: none)
	running sync.WaitGroup     // the sources' goroutines
	lastRun chan struct{}      // closed when the last started run ended
	done    chan struct{}      // closed by close: every stream ends
}

func newEventHub(cfg EventsConfig, log zerolog.Logger, start func(context.Context, *eventHub)) *eventHub {
	var b [epochLen / 2]byte
	_, _ = rand.Read(b[:])
	return &eventHub{cfg: cfg, log: log, epoch: hex.EncodeToString(b[:]), start: start,
		clients: map[*sseClient]struct{}{}, state: map[string]*event{}, done: make(chan struct{})}
}

// id is the SSE id of sequence seq.
func (h *eventHub) id(seq uint64) string { return h.epoch + "-" + strconv.FormatUint(seq, 10) }

// publish sends v (JSON) as an event of typ about object to every client
// that wants it; a client whose buffer is full is dropped (its handler
// sends "overflow" and ends), never waited for.
func (h *eventHub) publish(typ, object string, v any) { h.publishState(typ, object, "", v) }

// publishState is publish for an event that states something current
// (a node's stats, whether its stream is connected): the last one of each
// state key is given to every client that starts afresh, so that one
// joining late knows it without waiting for the next.
func (h *eventHub) publishState(typ, object, state string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		h.log.Error().Err(err).Str("type", typ).Msg("event not encodable")
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.seq++
	ev := &event{seq: h.seq, typ: typ, object: object, data: data}
	if state != "" {
		h.state[typ+"/"+state] = ev
	}
	if len(h.ring) < ringSize {
		h.ring = append(h.ring, ev)
	} else {
		h.ring[h.head] = ev
		h.head = (h.head + 1) % ringSize
	}
	for c := range h.clients {
		if !c.f.wants(ev) {
			continue
		}
		select {
		case c.ch <- ev:
		default:
			c.drop()
		}
	}
}

// forget drops the state events of key (an owner that is gone).
func (h *eventHub) forget(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range h.state {
		if strings.HasSuffix(k, "/"+key) {
			delete(h.state, k)
		}
	}
}

// join adds a client, refusing one past MaxStreams. It returns the kept
// events after the client's resume point that it wants (replay), and
// whether that resume point was honoured (resumed: nothing was missed).
// The first client starts the sources.
func (h *eventHub) join(f eventFilter) (c *sseClient, replay []*event, resumed bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, nil, false, fmt.Errorf("%w: locationd is shutting down", errUnavailable)
	}
	if len(h.clients) >= h.cfg.MaxStreams {
		return nil, nil, false, fmt.Errorf("%w: %d open (--events-max-streams %d)", errTooManyStreams, len(h.clients), h.cfg.MaxStreams)
	}
	c = &sseClient{f: f, ch: make(chan *event, h.cfg.Buffer), dropped: make(chan struct{})}
	if f.epoch == h.epoch && f.after <= h.seq {
		oldest := h.seq - uint64(len(h.ring)) + 1 // the first kept
		if f.after+1 >= oldest {
			resumed = true
			for i := range h.ring {
				ev := h.ring[(h.head+i)%len(h.ring)]
				if ev.seq > f.after && f.wants(ev) {
					replay = append(replay, ev)
				}
			}
		}
	}
	if !resumed {
		// What is true now, in the order it was published.
		for _, ev := range h.state {
			if f.wants(ev) {
				replay = append(replay, ev)
			}
		}
		slices.SortFunc(replay, func(a, b *event) int { return cmp.Compare(a.seq, b.seq) })
	}
	h.clients[c] = struct{}{}
	if len(h.clients) == 1 && h.start != nil && h.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		h.stop = cancel
		// The sources of a run that just ended may still be stopping: the
		// new ones start after, so no event is published twice.
		prev, done := h.lastRun, make(chan struct{})
		h.lastRun = done
		h.running.Go(func() {
			defer close(done)
			if prev != nil {
				<-prev
			}
			if ctx.Err() == nil {
				h.start(ctx, h)
			}
		})
	}
	return c, replay, resumed, nil
}

// leave removes a client; the last one stops the sources (without
// waiting: a next client's start waits for them to have ended).
func (h *eventHub) leave(c *sseClient) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.clients, c)
	if len(h.clients) == 0 && h.stop != nil {
		h.stop()
		h.stop = nil
		clear(h.state) // the next sources state it all again
	}
}

// streams is the number of open streams (tests, metrics).
func (h *eventHub) streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients)
}

// close ends every stream and the sources, and waits for the sources.
func (h *eventHub) close() {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.done)
		if h.stop != nil {
			h.stop()
			h.stop = nil
		}
	}
	h.mu.Unlock()
	h.running.Wait()
}
