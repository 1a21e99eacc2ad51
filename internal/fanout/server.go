package fanout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Range is a watched key range [Key, End), as etcd names it.
type Range struct{ Key, End string }

// Prefix is the range of every key under p.
func Prefix(p string) Range { return Range{Key: p, End: clientv3.GetPrefixRangeEnd(p)} }

// Options of a Server.
type Options struct {
	// Ranges the server serves (exactly these; required).
	Ranges []Range
	// History is how many recent events of each range are kept for
	// watchers that join behind the shared watch (default 10,000).
	History int
	// Queue bounds the responses waiting for one client stream (default
	// 1,024); a client that lets it fill has its stream closed.
	Queue int
	// Registry, when set, gets the server's metrics.
	Registry prometheus.Registerer
}

// Defaults of Options.
const (
	DefaultHistory = 10_000
	DefaultQueue   = 1024
)

// maxBatch bounds the events of one response the fan-out composes itself
// (a replay of its history).
const maxBatch = 1000

// Caps on what clients may make the fan-out hold: watches per client
// stream (a node needs two), and catch-ups at once (each is an etcd
// watch reading history). A create beyond either is refused (ErrTooMany);
// a location cache then re-lists and watches again after a backoff.
const (
	maxWatchesPerStream = 64
	maxCatchUps         = 128
)

// progressGap is the least time between two progress requests the server
// sends etcd: client requests that arrive meanwhile share the next one.
const progressGap = 50 * time.Millisecond

// Errors of the fan-out, sent as a watch's cancel reason.
var (
	// ErrRange: the watch asks for a range this fan-out does not serve.
	ErrRange = errors.New("fanout: range not served here")
	// ErrUnsupported: the watch asks for something the fan-out does not
	// do (previous values, a negative start revision, a watch id in use).
	ErrUnsupported = errors.New("fanout: watch request not supported")
	// ErrTooMany: a create beyond the fan-out's caps (maxWatchesPerStream,
	// maxCatchUps).
	ErrTooMany = errors.New("fanout: too many watches")
	// ErrUpstreamEnded: the shared watch ended while this watch was
	// catching up to it.
	ErrUpstreamEnded = errors.New("fanout: upstream watch ended")
	// ErrSlowClient closes a stream whose client does not keep up.
	ErrSlowClient = errors.New("fanout: client too slow, its queue is full")
)

// Server serves etcd's Watch API from one etcd watch per range (doc.go).
type Server struct {
	pb.UnimplementedWatchServer

	up      clientv3.Watcher
	kv      clientv3.KV
	ranges  map[Range]bool
	history int
	queue   int
	log     zerolog.Logger
	m       *metrics

	life      context.Context // ended by Close
	stop      context.CancelFunc
	feedCtx   context.Context // one upstream stream for every shared watch
	catchCtx  context.Context // another for catch-ups (they are not synced)
	wg        sync.WaitGroup
	progressc chan struct{}

	mu       sync.Mutex
	feeds    map[Range]*feed
	catching int // catch-ups running
}

// New returns a server following etcd through c (its watcher for the
// shared watches, its KV to resolve a watch "from now"). Close stops it.
func New(c *clientv3.Client, o Options, log zerolog.Logger) (*Server, error) {
	if len(o.Ranges) == 0 {
		return nil, errors.New("fanout: no range to serve")
	}
	if o.History <= 0 {
		o.History = DefaultHistory
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	life, stop := context.WithCancel(context.Background())
	s := &Server{
		up: c.Watcher, kv: c.KV, ranges: map[Range]bool{}, history: o.History, queue: o.Queue, log: log,
		m: newMetrics(o.Registry), life: life, stop: stop, progressc: make(chan struct{}, 1), feeds: map[Range]*feed{},
	}
	for _, r := range o.Ranges {
		s.ranges[r] = true
	}
	// WithRequireLeader: etcd ends the shared watches when its member loses
	// the leader, and every follower hears it (doc.go).
	s.feedCtx = clientv3.WithRequireLeader(life)
	s.catchCtx = metadata.AppendToOutgoingContext(s.feedCtx, "meshloc-fanout", "catch-up")
	s.wg.Go(s.pump)
	return s, nil
}

// Register serves s on g.
func (s *Server) Register(g *grpc.Server) { pb.RegisterWatchServer(g, s) }

// Close ends every shared watch and waits for the server's goroutines.
// Stop the gRPC server first: streams still open end with it.
func (s *Server) Close() {
	s.stop()
	s.wg.Wait()
}

// requestProgress asks the pump for a progress request to etcd.
func (s *Server) requestProgress() {
	select {
	case s.progressc <- struct{}{}:
	default:
	}
}

// pump sends etcd a progress request after each ask, at most one per
// progressGap: an ask that arrives during the gap is answered by the
// request sent at its end, so every ask is followed by a request sent
// after it.
func (s *Server) pump() {
	for {
		select {
		case <-s.life.Done():
			return
		case <-s.progressc:
		}
		s.mu.Lock()
		feeds, catching := len(s.feeds), s.catching
		s.mu.Unlock()
		// (With no watch on a stream, a request would open one for nothing.)
		if feeds > 0 {
			s.progressOn(s.feedCtx)
		}
		if catching > 0 {
			s.progressOn(s.catchCtx)
		}
		t := time.NewTimer(progressGap)
		select {
		case <-s.life.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (s *Server) progressOn(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_ = s.up.RequestProgress(rctx) // lost: the next ask makes another
}

// Watch serves one client stream.
func (s *Server) Watch(gs pb.Watch_WatchServer) error {
	ctx, cancel := context.WithCancelCause(gs.Context())
	st := &stream{s: s, ctx: ctx, cancel: cancel, out: make(chan *pb.WatchResponse, s.queue), subs: map[int64]*sub{}}
	s.wg.Go(func() {
		for {
			req, err := gs.Recv()
			if err != nil {
				cancel(err)
				return
			}
			if err := st.handle(req); err != nil {
				cancel(err)
				return
			}
		}
	})
	// Sends run apart: a client that stops reading blocks a send, and only
	// the handler's return (which ends the stream) unblocks it.
	s.wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case r := <-st.out:
				if err := gs.Send(r); err != nil {
					cancel(err)
					return
				}
			}
		}
	})
	<-ctx.Done()
	st.close()
	if errors.Is(context.Cause(ctx), ErrSlowClient) {
		s.m.slow.Inc()
		return status.Error(codes.Unavailable, ErrSlowClient.Error())
	}
	return nil
}

// stream is one client's Watch stream.
type stream struct {
	s      *Server
	ctx    context.Context
	cancel context.CancelCauseFunc
	out    chan *pb.WatchResponse

	mu     sync.Mutex
	subs   map[int64]*sub
	nextID int64
}

// post queues r for the client; it never blocks. A full queue closes the
// stream (the client resumes each watch where it was).
func (st *stream) post(r *pb.WatchResponse) {
	if st.ctx.Err() != nil {
		return
	}
	select {
	case st.out <- r:
	default:
		st.cancel(ErrSlowClient)
	}
}

// refuse answers a create request that will not be served, as etcd does.
func (st *stream) refuse(err error) {
	st.post(&pb.WatchResponse{Header: &pb.ResponseHeader{}, WatchId: clientv3.InvalidWatchID,
		Created: true, Canceled: true, CancelReason: err.Error()})
}

func (st *stream) handle(req *pb.WatchRequest) error {
	switch r := req.RequestUnion.(type) {
	case *pb.WatchRequest_CreateRequest:
		st.create(r.CreateRequest)
	case *pb.WatchRequest_CancelRequest:
		st.mu.Lock()
		w := st.subs[r.CancelRequest.WatchId]
		delete(st.subs, r.CancelRequest.WatchId)
		st.mu.Unlock()
		if w != nil {
			st.s.detach(w)
			st.post(&pb.WatchResponse{Header: &pb.ResponseHeader{}, WatchId: w.id, Canceled: true})
		}
	case *pb.WatchRequest_ProgressRequest:
		st.s.requestProgress()
	default:
		return status.Error(codes.InvalidArgument, "fanout: unknown watch request")
	}
	return nil
}

func (st *stream) create(cr *pb.WatchCreateRequest) {
	if cr == nil {
		st.refuse(ErrUnsupported)
		return
	}
	rng := Range{Key: string(cr.Key), End: string(cr.RangeEnd)}
	if !st.s.ranges[rng] {
		st.refuse(fmt.Errorf("%w: [%q, %q)", ErrRange, cr.Key, cr.RangeEnd))
		return
	}
	if cr.PrevKv || cr.StartRevision < 0 || cr.WatchId < 0 {
		st.refuse(ErrUnsupported)
		return
	}
	w := &sub{st: st, rng: rng, next: cr.StartRevision, progress: cr.ProgressNotify}
	for _, f := range cr.Filters {
		switch f {
		case pb.WatchCreateRequest_NOPUT:
			w.noPut = true
		case pb.WatchCreateRequest_NODELETE:
			w.noDelete = true
		}
	}
	if w.next == 0 {
		// From now: the revision a linearizable read answers at.
		rctx, cancel := context.WithTimeout(st.ctx, 5*time.Second)
		resp, err := st.s.kv.Get(rctx, rng.Key, clientv3.WithLimit(1), clientv3.WithCountOnly())
		cancel()
		if err != nil {
			st.refuse(err)
			return
		}
		w.next = resp.Header.Revision + 1
	}
	st.mu.Lock()
	if len(st.subs) >= maxWatchesPerStream {
		st.mu.Unlock()
		st.refuse(fmt.Errorf("%w: %d on this stream", ErrTooMany, maxWatchesPerStream))
		return
	}
	id := cr.WatchId
	if id == 0 {
		for st.subs[st.nextID] != nil {
			st.nextID++
		}
		id = st.nextID
		st.nextID++
	} else if st.subs[id] != nil {
		st.mu.Unlock()
		st.refuse(fmt.Errorf("%w: watch id %d in use", ErrUnsupported, id))
		return
	}
	w.id = id
	st.subs[id] = w
	st.mu.Unlock()
	st.s.m.clients.Inc() // finish counts it out
	// The creation comes first, then what the watch sends (attach).
	st.post(&pb.WatchResponse{Header: &pb.ResponseHeader{Revision: w.next - 1}, WatchId: id, Created: true})
	st.s.attach(w)
}

// forget drops a watch that ended on the server's side.
func (st *stream) forget(w *sub) {
	st.mu.Lock()
	if st.subs[w.id] == w {
		delete(st.subs, w.id)
	}
	st.mu.Unlock()
}

// close detaches every watch of the stream.
func (st *stream) close() {
	st.cancel(context.Canceled)
	st.mu.Lock()
	subs := st.subs
	st.subs = map[int64]*sub{}
	st.mu.Unlock()
	for _, w := range subs {
		st.s.detach(w)
	}
}
