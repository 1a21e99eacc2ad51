package authority

import (
	"context"
	"errors"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Many writes of one caller at once (RecoverMany): they join the batcher's
// queue together, so they fill its batches (each batch as large as etcd's
// limits allow) instead of waiting for one goroutine each. Each keeps its
// own compares and outcome, as a write of its own would.

// BatchStats counts what a batched Store's writes took: etcd requests sent,
// and the writes they carried (one each when alone). Writes/Requests is
// how many writes shared a request on average. ReadRequests and Reads are
// the same for its local reads. HoistMisses counts the batches sent again
// because a compare all their writes shared failed (batch_hoist.go). Zero
// for a Store that is not batched.
type BatchStats struct {
	Requests, Writes    int64
	ReadRequests, Reads int64
	HoistMisses         int64
}

// BatchStats of s (see the type).
func (s *Store) BatchStats() BatchStats {
	if s.batch == nil {
		return BatchStats{}
	}
	return BatchStats{Requests: s.batch.requests.Load(), Writes: s.batch.writes.Load(),
		ReadRequests: s.reads.requests.Load(), Reads: s.reads.writes.Load(),
		HoistMisses: s.batch.hoistMisses.Load()}
}

// errNotSent: a write of doMany was never sent (its caller's context
// ended first); nothing of it reached etcd.
var errNotSent = errors.New("authority: not sent")

// pendingTxn is one transaction of a doMany call.
type pendingTxn struct {
	cmps         []clientv3.Cmp
	thens, elses []clientv3.Op
}

// doMany commits txns through the batcher and returns each one's result
// (a response, or the error of its batch: ctx's for one never sent). The
// writes share one lead channel: whichever of them the batcher hands the
// next batch to, this goroutine sends it.
func (b *batcher) doMany(ctx context.Context, txns []pendingTxn) []batchResult {
	out := make([]batchResult, len(txns))
	if len(txns) == 0 {
		return out
	}
	lead := make(chan struct{}, 1) // the batcher hands at most one lead at a time
	ws := make([]*batchWrite, len(txns))
	for i, t := range txns {
		w := &batchWrite{cmps: t.cmps, thens: t.thens, elses: t.elses, done: make(chan batchResult, 1), lead: lead, queued: true}
		w.size = opsSize(w.thens) + opsSize(w.elses) + 64*len(w.cmps)
		ws[i] = w
	}
	b.mu.Lock()
	b.queue = append(b.queue, ws...)
	if !b.busy {
		b.busy, ws[0].leads = true, true
		lead <- struct{}{}
	}
	b.mu.Unlock()
	done := ctx.Done()
	for i, w := range ws {
	wait:
		for {
			select {
			case r := <-w.done:
				out[i] = r
				break wait
			case <-lead:
				b.send()
			case <-done:
				b.mu.Lock()
				unsent := map[*batchWrite]bool{}
				for _, x := range ws[i:] {
					if x.queued && !x.leads {
						unsent[x], x.queued = true, false
						x.done <- batchResult{err: fmt.Errorf("%w: %w", errNotSent, ctx.Err())}
					}
				}
				b.queue = slices.DeleteFunc(b.queue, func(x *batchWrite) bool { return unsent[x] })
				b.mu.Unlock()
				done = nil // the others were sent, or are about to be by this goroutine: their results decide
			}
		}
	}
	return out
}
