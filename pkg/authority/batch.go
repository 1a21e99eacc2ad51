package authority

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/tracing"
)

// Batched writes: the relocations in flight on one node (their intents,
// commits and preserves) share etcd round trips. Each write stays its own
// transaction with its own compares and outcome, nested in one outer
// transaction without compares (etcd's OpTxn): one raft entry, one apply,
// one reply for many. A write that finds no batch in flight goes at once
// (no added wait when idle); the writes that come while one is in flight go
// together in the next. No goroutine of its own: the first writer of a
// batch sends it, and hands the next batch to the first writer waiting.
//
// No two writes of a batch touch a key one of them writes (batch_keys.go).
// A batch etcd refuses as a whole (too many operations, too large; two
// puts of one key cannot happen) goes again one write at a time. A batch whose
// outcome is unknown (a timeout, a lost leader) reports that to each of its
// writes, which resolve it by reading back, as alone.

// batchTimeout bounds one batch's round trip.
const batchTimeout = 5 * time.Second

type batcher struct {
	kv     clientv3.KV
	limits Limits
	reads  bool // a batcher of serializable reads (batch_reads.go)

	mu    sync.Mutex
	busy  bool // a batch is being sent, or handed to its sender
	queue []*batchWrite
	keys  batchKeys // the batch being built's (send; under mu)

	// requests and writes count what commit sent: etcd requests, and the
	// writes they carried (BatchStats).
	requests, writes atomic.Int64
	// hoistMisses counts the batches sent again without hoisting, a
	// shared compare having failed (batch_hoist.go).
	hoistMisses atomic.Int64
}

// batchWrite is one transaction waiting for its batch.
type batchWrite struct {
	cmps         []clientv3.Cmp
	thens, elses []clientv3.Op
	size         int
	done         chan batchResult // its result (buffered)
	lead         chan struct{}    // it sends the next batch (buffered)
	queued       bool             // in queue, not taken into a batch
	leads        bool             // chosen to send the next batch
	keys         []keySpan        // the keys it reads, then writes (spans; batch_keys.go)
	nread        int
}

type batchResult struct {
	resp *clientv3.TxnResponse
	err  error
}

// Batched returns a Store whose relocation writes (Intend, Preserve,
// Commit, and their group forms) and activations share etcd round trips
// with the other writes of this Store in flight, each within the
// cluster's limits; and whose local reads (ReadLocal) share them with
// the other local reads in flight (batch_reads.go).
func (s *Store) Batched(l Limits) *Store {
	c := *s
	c.batch = &batcher{kv: s.c, limits: l.orDefault()}
	c.reads = &batcher{kv: s.c, limits: l.orDefault(), reads: true}
	return &c
}

// txn is the transaction a relocation write (what: intent, commit, ...)
// uses: batched when the Store is; its own span when ctx is traced
// (trace.go).
func (s *Store) txn(ctx context.Context, what string) clientv3.Txn {
	var t clientv3.Txn
	if s.batch == nil {
		t = s.c.Txn(ctx)
	} else {
		t = &batchTxn{b: s.batch, ctx: ctx}
	}
	if tracing.Recording(ctx) {
		return &tracedTxn{Txn: t, ctx: ctx, what: what, batched: s.batch != nil}
	}
	return t
}

// batchTxn is a clientv3.Txn that commits through the batcher.
type batchTxn struct {
	b            *batcher
	ctx          context.Context
	cmps         []clientv3.Cmp
	thens, elses []clientv3.Op
}

func (t *batchTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.cmps = append(t.cmps, cs...)
	return t
}

func (t *batchTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.thens = append(t.thens, ops...)
	return t
}

func (t *batchTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.elses = append(t.elses, ops...)
	return t
}

func (t *batchTxn) Commit() (*clientv3.TxnResponse, error) {
	w := &batchWrite{cmps: t.cmps, thens: t.thens, elses: t.elses, done: make(chan batchResult, 1), lead: make(chan struct{}, 1), queued: true}
	w.size = opsSize(w.thens) + opsSize(w.elses) + 64*len(w.cmps)
	return t.b.do(t.ctx, w)
}

// opsSize estimates the bytes of ops on the wire (keys and values, and a
// margin per operation).
func opsSize(ops []clientv3.Op) int {
	n := 0
	for _, op := range ops {
		n += len(op.KeyBytes()) + len(op.ValueBytes()) + 32
	}
	return n
}

func (b *batcher) do(ctx context.Context, w *batchWrite) (*clientv3.TxnResponse, error) {
	b.mu.Lock()
	b.queue = append(b.queue, w)
	if !b.busy {
		b.busy, w.leads = true, true
		w.lead <- struct{}{}
	}
	b.mu.Unlock()
	done := ctx.Done()
	for {
		select {
		case r := <-w.done:
			return r.resp, r.err
		case <-w.lead:
			b.send()
		case <-done:
			b.mu.Lock()
			if w.queued && !w.leads {
				b.queue = slices.DeleteFunc(b.queue, func(x *batchWrite) bool { return x == w })
				b.mu.Unlock()
				return nil, ctx.Err() // never sent
			}
			b.mu.Unlock()
			done = nil // sent, or about to be by w itself: its result decides
		}
	}
}

// send sends the next batch from the queue's head, delivers each write's
// result, and hands the batch after it to the first write still waiting.
// The batch takes the queue's writes in order while they fit, but for
// those that touch a key of a write already in it, which stay queued, in
// order, for a later batch (batch_keys.go).
func (b *batcher) send() {
	b.mu.Lock()
	var batch []*batchWrite
	size, inner := 0, 0
	rest := b.queue[:0:0]
	b.keys.reset()
	for i, w := range b.queue {
		if len(batch) > 0 && !b.fits(len(batch)+1, max(inner, w.ops()), size+w.size) {
			rest = append(rest, b.queue[i:]...)
			break
		}
		if len(batch) > 0 && b.keys.meets(w) {
			rest = append(rest, w)
			continue
		}
		b.keys.add(w)
		batch = append(batch, w)
		size += w.size
		inner = max(inner, w.ops())
		w.queued = false
	}
	b.queue = rest
	b.mu.Unlock()

	b.commit(batch)

	b.mu.Lock()
	if len(b.queue) > 0 {
		next := b.queue[0]
		next.leads = true
		next.lead <- struct{}{}
	} else {
		b.busy = false
	}
	b.mu.Unlock()
}

// fits reports whether a batch of n writes, the largest with inner
// operations, of about size bytes, stays within the cluster's limits. etcd
// counts a nested transaction's operations against what its parent left:
// the batch's n nested transactions plus the largest one's operations must
// stay within --max-txn-ops.
func (b *batcher) fits(n, inner, size int) bool {
	return n+inner <= b.limits.MaxTxnOps && size <= b.limits.MaxRequestBytes/2
}

// ops is what etcd counts of w against --max-txn-ops: the largest of its
// compares, Then and Else.
func (w *batchWrite) ops() int { return max(len(w.cmps), len(w.thens), len(w.elses)) }

// commit sends batch as one transaction (a single write as itself).
func (b *batcher) commit(batch []*batchWrite) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	b.requests.Add(1)
	b.writes.Add(int64(len(batch)))
	if b.reads {
		b.commitReads(ctx, batch)
		return
	}
	if len(batch) == 1 {
		b.alone(ctx, batch[0])
		return
	}
	b.nested(ctx, batch, true)
}

// nested sends batch as nested transactions of one, hoisting the compares
// all of them carry when it may (batch_hoist.go).
func (b *batcher) nested(ctx context.Context, batch []*batchWrite, mayHoist bool) {
	var shared []clientv3.Cmp
	var rest [][]clientv3.Cmp
	if mayHoist {
		shared, rest = hoist(batch)
	}
	ops := make([]clientv3.Op, len(batch))
	for i, w := range batch {
		cmps := w.cmps
		if rest != nil {
			cmps = rest[i]
		}
		ops[i] = clientv3.OpTxn(cmps, w.thens, w.elses)
	}
	resp, err := b.kv.Txn(ctx).If(shared...).Then(ops...).Commit()
	if err == nil && !resp.Succeeded {
		// A shared compare failed and nothing was applied.
		b.requests.Add(1)
		b.hoistMisses.Add(1)
		b.nested(ctx, batch, false)
		return
	}
	switch {
	case err != nil && refusedWhole(err):
		b.requests.Add(int64(len(batch)))
		for _, w := range batch {
			b.alone(ctx, w)
		}
		return
	case err != nil:
		for _, w := range batch {
			w.done <- batchResult{err: err}
		}
		return
	}
	for i, w := range batch {
		inner := resp.Responses[i].GetResponseTxn()
		inner.Header = resp.Header
		w.done <- batchResult{resp: (*clientv3.TxnResponse)(inner)}
	}
}

func (b *batcher) alone(ctx context.Context, w *batchWrite) {
	resp, err := b.kv.Txn(ctx).If(w.cmps...).Then(w.thens...).Else(w.elses...).Commit()
	w.done <- batchResult{resp: resp, err: err}
}

// refusedWhole: etcd refused the batch before applying anything, for what
// it holds together (not for any one write).
func refusedWhole(err error) bool {
	return errors.Is(err, rpctypes.ErrDuplicateKey) || errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge)
}
