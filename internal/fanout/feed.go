package fanout

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// sub is one client watch.
type sub struct {
	st       *stream
	id       int64
	rng      Range
	progress bool
	noPut    bool
	noDelete bool

	// next is the least revision the watch still needs: every event of
	// its range below next was sent. Owned by its catch-up until it joins
	// its feed, then guarded by the feed's mu.
	next int64
	// feed is the shared watch the sub belongs to (set once, in attach).
	feed *feed
	// live: the sub is in feed.subs (guarded by feed.mu).
	live bool
	// catchCancel ends the sub's catch-up, if it has one (set in attach).
	catchCancel context.CancelFunc

	mu   sync.Mutex
	gone bool // detached or cancelled: nothing more is posted
}

// post sends r to the client unless the watch is gone.
func (w *sub) post(r *pb.WatchResponse) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.gone {
		w.st.post(r)
	}
}

// finish marks the watch gone, posting r last if given; it reports
// whether the watch was not gone already (the one call that ends it).
func (w *sub) finish(r *pb.WatchResponse) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gone {
		return false
	}
	w.gone = true
	if r != nil {
		w.st.post(r)
	}
	w.st.s.m.clients.Dec()
	return true
}

// isGone reports whether the watch ended.
func (w *sub) isGone() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gone
}

// send posts the events of evs that w still needs (and its filters let
// through), headed with rev, and moves w past rev. rev is the revision
// every event of w's range up to which has now been sent to w.
func (w *sub) send(evs []*mvccpb.Event, rev int64) {
	if rev < w.next {
		return
	}
	out := make([]*mvccpb.Event, 0, len(evs))
	for _, ev := range evs {
		if ev.Kv.ModRevision < w.next {
			continue
		}
		if (ev.Type == mvccpb.PUT && w.noPut) || (ev.Type == mvccpb.DELETE && w.noDelete) {
			continue
		}
		out = append(out, ev)
	}
	w.next = rev + 1
	if len(out) > 0 {
		w.post(&pb.WatchResponse{Header: &pb.ResponseHeader{Revision: rev}, WatchId: w.id, Events: out})
	}
}

// notify posts a progress notification of rev (every event up to rev was
// sent), to a watch that asked for them and has reached rev.
func (w *sub) notify(rev int64) {
	if rev < w.next-1 {
		return
	}
	w.next = rev + 1
	if w.progress {
		w.post(&pb.WatchResponse{Header: &pb.ResponseHeader{Revision: rev}, WatchId: w.id})
	}
}

// cancel ends w with an error of the upstream watch, as etcd would.
func (w *sub) cancel(compact int64, reason string) {
	w.finish(&pb.WatchResponse{Header: &pb.ResponseHeader{}, WatchId: w.id, Canceled: true,
		CompactRevision: compact, CancelReason: reason})
	w.st.forget(w)
}

// feed is the shared etcd watch of one range, with its recent history.
type feed struct {
	s      *Server
	rng    Range
	cancel context.CancelFunc

	mu sync.Mutex
	// pos: every event of the range up to pos has been received. floor:
	// hist holds every event of the range from floor to pos, in order.
	pos, floor int64
	hist       []*mvccpb.Event
	subs       map[*sub]struct{}
	catching   int  // catch-ups that will join
	stopped    bool // no more subs (stopped, or its watch ended)
}

// newFeedLocked starts the shared watch of rng from revision from (s.mu held).
func (s *Server) newFeedLocked(rng Range, from int64) *feed {
	ctx, cancel := context.WithCancel(s.feedCtx)
	f := &feed{s: s, rng: rng, cancel: cancel, pos: from - 1, floor: from, subs: map[*sub]struct{}{}}
	s.feeds[rng] = f
	s.m.upstream.Inc()
	wch := s.up.Watch(ctx, rng.Key, clientv3.WithRange(rng.End), clientv3.WithRev(from), clientv3.WithProgressNotify())
	s.wg.Go(func() { f.run(wch) })
	s.requestProgress() // an idle range still gets its first progress
	return f
}

func (f *feed) run(wch clientv3.WatchChan) {
	defer f.s.m.upstream.Dec()
	for wr := range wch {
		if wr.Err() != nil {
			f.die(wr.CompactRevision, wr.Err().Error())
			return
		}
		f.apply(wr)
	}
	f.die(0, ErrUpstreamEnded.Error())
}

// apply takes one response of the shared watch to the history and to
// every live sub.
func (f *feed) apply(wr clientv3.WatchResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case wr.Created:
		return
	case len(wr.Events) > 0:
		// A catching-up etcd watcher heads a batch with the current
		// revision although more events may follow: only the last event
		// vouches for its own revision.
		rev := wr.Events[len(wr.Events)-1].Kv.ModRevision
		if rev <= f.pos {
			return
		}
		f.hist = append(f.hist, wr.Events...)
		f.pos = rev
		f.trimLocked()
		for w := range f.subs {
			w.send(wr.Events, rev)
		}
	case wr.IsProgressNotify():
		// etcd notifies only a synced watcher: every event up to the
		// header's revision was received.
		rev := wr.Header.Revision
		if rev <= f.pos {
			rev = f.pos
		}
		f.pos = rev
		for w := range f.subs {
			w.notify(rev)
		}
	}
}

// trimLocked bounds the history, dropping whole revisions from its front.
func (f *feed) trimLocked() {
	max := f.s.history
	if len(f.hist) <= max+max/4 {
		return
	}
	cut := len(f.hist) - max
	for cut < len(f.hist) && f.hist[cut].Kv.ModRevision == f.hist[cut-1].Kv.ModRevision {
		cut++
	}
	f.floor = f.hist[cut-1].Kv.ModRevision + 1
	f.hist = append([]*mvccpb.Event(nil), f.hist[cut:]...)
}

// joinLocked makes w live if the history reaches back to w.next: it sends
// w what it holds from there, and w then follows the shared watch.
func (f *feed) joinLocked(w *sub) bool {
	if w.isGone() {
		return true // detached meanwhile: nothing to follow
	}
	if w.next < f.floor {
		return false
	}
	if w.next <= f.pos {
		i := sort.Search(len(f.hist), func(i int) bool { return f.hist[i].Kv.ModRevision >= w.next })
		rest := f.hist[i:]
		for len(rest) > 0 {
			n := min(len(rest), maxBatch)
			for n < len(rest) && rest[n].Kv.ModRevision == rest[n-1].Kv.ModRevision {
				n++ // a revision's events stay together
			}
			upTo := rest[n-1].Kv.ModRevision
			if n == len(rest) {
				upTo = f.pos
			}
			w.send(rest[:n], upTo)
			rest = rest[n:]
		}
		w.next = max(w.next, f.pos+1)
	}
	w.live = true
	f.subs[w] = struct{}{}
	return true
}

// die ends the shared watch after etcd ended it: every live sub is
// cancelled with etcd's reason; a later watch of the range starts anew.
func (f *feed) die(compact int64, reason string) {
	s := f.s
	s.mu.Lock()
	if s.feeds[f.rng] == f {
		delete(s.feeds, f.rng)
	}
	s.mu.Unlock()
	f.mu.Lock()
	f.stopped = true
	subs := f.subs
	f.subs = map[*sub]struct{}{}
	f.mu.Unlock()
	f.cancel()
	if s.life.Err() != nil {
		return // closing: the streams end with the gRPC server
	}
	if len(subs) > 0 {
		s.log.Warn().Str("key", f.rng.Key).Str("reason", reason).Int("watchers", len(subs)).Msg("fanout: shared watch ended")
	}
	for w := range subs {
		w.cancel(compact, reason)
	}
}

// attach puts a new sub on its range's feed: live if the history reaches
// back to it, else behind a catch-up of its own.
func (s *Server) attach(w *sub) {
	s.mu.Lock()
	f := s.feeds[w.rng]
	if f == nil {
		s.mu.Unlock()
		from, err := s.feedStart(w.rng, w.next)
		if err != nil {
			w.cancel(0, err.Error())
			return
		}
		s.mu.Lock()
		if f = s.feeds[w.rng]; f == nil {
			f = s.newFeedLocked(w.rng, from)
		}
	}
	w.feed = f
	f.mu.Lock()
	if f.joinLocked(w) {
		f.mu.Unlock()
		s.mu.Unlock()
		return
	}
	if s.catching >= maxCatchUps {
		f.mu.Unlock()
		s.mu.Unlock()
		w.cancel(0, fmt.Sprintf("%v: %d catching up", ErrTooMany, maxCatchUps))
		s.release(f)
		return
	}
	f.catching++
	s.catching++
	ctx, cancel := context.WithCancel(s.catchCtx)
	w.catchCancel = cancel
	f.mu.Unlock()
	s.mu.Unlock()
	s.m.catchups.Inc()
	s.m.upstream.Inc()
	wch := s.up.Watch(ctx, w.rng.Key, clientv3.WithRange(w.rng.End), clientv3.WithRev(w.next), clientv3.WithProgressNotify())
	s.wg.Go(func() { s.catchUp(ctx, w, wch) })
	s.requestProgress() // an idle range still gets a progress to reach
}

// feedStart is the revision a new shared watch for a sub from next starts
// at: next, but never after etcd's current revision. etcd answers a
// progress request only while no watcher of the stream starts after its
// current revision, and a shared watch lives long: one that started in
// the future would hold back every progress notification until the next
// write anywhere (its subs skip what comes before next).
func (s *Server) feedStart(rng Range, next int64) (int64, error) {
	rctx, cancel := context.WithTimeout(s.feedCtx, 5*time.Second)
	defer cancel()
	resp, err := s.kv.Get(rctx, rng.Key, clientv3.WithCountOnly()) // (a key its identity may read)
	if err != nil {
		return 0, fmt.Errorf("fanout: etcd's revision: %w", err)
	}
	return min(next, resp.Header.Revision), nil
}

// detach removes a sub its client cancelled, or whose stream ended.
func (s *Server) detach(w *sub) {
	if !w.finish(nil) {
		return // already ended by the server
	}
	s.mu.Lock()
	f := w.feed // set by attach under s.mu
	s.mu.Unlock()
	if f == nil {
		return // not attached yet: attach sees it gone
	}
	f.mu.Lock()
	if w.live {
		delete(f.subs, w)
		w.live = false
	}
	f.mu.Unlock()
	if w.catchCancel != nil {
		w.catchCancel() // a catch-up still running releases f when it stops
	}
	s.release(f)
}

// release stops f once no sub follows it and none will join.
func (s *Server) release(f *feed) {
	s.mu.Lock()
	f.mu.Lock()
	idle := len(f.subs) == 0 && f.catching == 0 && !f.stopped
	if idle {
		f.stopped = true
		if s.feeds[f.rng] == f {
			delete(s.feeds, f.rng)
		}
	}
	f.mu.Unlock()
	s.mu.Unlock()
	if idle {
		f.cancel()
	}
}
