package fanout

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// catchUp serves w from an etcd watch of its own, from w.next, until the
// feed's history reaches back to where w is; w then joins the feed. etcd's
// errors on the way (a compacted revision) reach w as etcd sent them.
func (s *Server) catchUp(ctx context.Context, w *sub, wch clientv3.WatchChan) {
	f := w.feed
	defer func() {
		w.catchCancel() // the catch-up's own etcd watch
		s.m.upstream.Dec()
		s.mu.Lock()
		s.catching--
		s.mu.Unlock()
		f.mu.Lock()
		f.catching--
		f.mu.Unlock()
		s.release(f)
	}()
	for wr := range wch {
		if err := wr.Err(); err != nil {
			if ctx.Err() == nil {
				w.cancel(wr.CompactRevision, err.Error())
			}
			return
		}
		switch {
		case len(wr.Events) > 0:
			w.send(wr.Events, wr.Events[len(wr.Events)-1].Kv.ModRevision)
		case wr.IsProgressNotify():
			w.notify(wr.Header.Revision)
		default:
			continue // its creation
		}
		f.mu.Lock()
		if f.stopped {
			f.mu.Unlock()
			w.cancel(0, ErrUpstreamEnded.Error())
			return
		}
		joined := f.joinLocked(w)
		f.mu.Unlock()
		if joined {
			return
		}
	}
	if ctx.Err() == nil {
		w.cancel(0, ErrUpstreamEnded.Error())
	}
}
