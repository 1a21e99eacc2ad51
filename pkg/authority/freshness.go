package authority

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Freshness (docs/design.md §5 "Stale owners cannot be believed"): FreshAt
// is a time t such that every change of a record committed before t is in
// the cache. It is never the time a message arrived — a notification may
// have waited in etcd's send buffer, a fan-out's queue or the network for
// any time — but the time a request to etcd was sent, whose answer the
// cache has since caught up with:
//
//   - a load: its list is read at one revision by a linearizable read sent
//     at t, so it holds every change committed before t;
//   - a barrier: a linearizable read, sent at t straight to etcd, answers
//     etcd's revision r, which counts every change committed before t; once
//     the watch has delivered everything up to r (an event or a progress
//     notification of r or later), so does the cache.
//
// This holds whatever path the watch takes (straight from etcd, or a
// fan-out) as long as that path delivers every event in order and sends a
// progress notification of r only once everything up to r was sent; a
// path that stops delivering leaves barriers unreached, and the cache goes
// stale after the TTL, as it should.

// barrier is a revision etcd answered to a read sent at a known time.
type barrier struct {
	at  time.Time
	rev int64
}

// maxBarriers bounds the barriers kept; a watch that far behind keeps the
// newest ones (an older one reached would not make the cache fresh for long).
const maxBarriers = 16

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// reachBarriersLocked takes the barriers the cache has reached into freshAt.
func (c *Cache) reachBarriersLocked() {
	n := 0
	for _, b := range c.barriers {
		if b.rev <= c.rev {
			c.freshAt = later(c.freshAt, b.at)
			continue
		}
		c.barriers[n] = b
		n++
	}
	clear(c.barriers[n:])
	c.barriers = c.barriers[:n]
}

// KeepFresh sets a barrier every interval until ctx ends, and asks the
// watch path for a progress notification after each, so FreshAt stays
// recent while no record changes (etcd's own notifications of an idle
// watch come every ten minutes by default). A read that fails sets no
// barrier: a cache that cannot hear from etcd goes stale.
func (c *Cache) KeepFresh(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.Barrier(ctx, every)
		}
	}
}

// Barrier sets one barrier (a linearizable read of etcd's revision, sent
// now, on the cache's etcd client) and asks the watch path for a progress
// notification; it gives up after timeout. It reports whether etcd answered.
func (c *Cache) Barrier(ctx context.Context, timeout time.Duration) bool {
	// The same metadata as the watch's context: the progress request goes
	// on the watch's stream.
	rctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), timeout)
	defer cancel()
	at := c.now()
	// Linearizable (never WithSerializable): its revision counts every
	// change committed before at. One key, counted: nothing is read.
	resp, err := c.c.Get(rctx, c.keys.AuthorityPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return false
	}
	c.mu.Lock()
	if len(c.barriers) == maxBarriers {
		c.barriers = append(c.barriers[:0], c.barriers[1:]...)
	}
	c.barriers = append(c.barriers, barrier{at: at, rev: resp.Header.Revision})
	c.reachBarriersLocked()
	c.mu.Unlock()
	_ = c.w.RequestProgress(rctx)
	return true
}
