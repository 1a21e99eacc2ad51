package relocator

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/relocation"
)

// The one-write rule's I/O (docs/proposals/one-write-bulk-moves.md): a
// bulk source writes its units' intents into one key, relocations/<id>,
// once they are all captured; its target reads that key once. The machines
// decide what the key's result means; the runs only batch the I/O.

// BulkIntents is the etcd side of the one-write rule (pkg/authority's
// *Store).
type BulkIntents interface {
	WriteBulkIntent(ctx context.Context, id string, b authority.BulkIntent) (authority.BulkIntentResult, error)
	ReadBulkIntent(ctx context.Context, id string) (authority.BulkIntent, int64, bool, error)
	DeleteBulkIntent(ctx context.Context, id string, revision int64, source authority.OwnerRef) (bool, error)
	// MaxBulkUnits is how many units one key may carry.
	MaxBulkUnits() int
}

// awaiting is a unit of a bulk source waiting for its bulk's key.
type awaiting struct {
	u *unit
	a relocation.AwaitBulkIntent
}

// bulkKeys writes a bulk source's keys: each write takes every unit
// waiting then, cut into keys of at most MaxBulkUnits, and tells each
// unit its result through the run's queue. A write waits for the seals in
// flight, so that a bulk's units share one key, but no longer than
// keyWait: a unit whose seal waits on a long handler holds up no other.
type bulkKeys struct {
	intents BulkIntents
	self    record.OwnerRef
	base    string // the run's id: key i is "<base>.<i>"

	waiting  []awaiting
	since    time.Time    // when the first of waiting asked
	sealing  int          // seals in flight
	inflight atomic.Int32 // writes in flight

	mu      sync.Mutex
	next    int
	written map[string]int64 // key id → ModRevision, to delete at the end
}

// keyWait bounds how long a captured unit waits for the other seals in
// flight before its key is written without them.
const keyWait = 20 * time.Millisecond

// await takes a unit's request for its bulk's key.
func (k *bulkKeys) await(w awaiting, now time.Time) {
	if len(k.waiting) == 0 {
		k.since = now
	}
	k.waiting = append(k.waiting, w)
}

// ready reports whether the waiting units should be written now: no
// write in flight, and no seal either, or keyWait passed.
func (k *bulkKeys) ready(now time.Time) bool {
	return len(k.waiting) > 0 && k.inflight.Load() == 0 && (k.sealing == 0 || now.Sub(k.since) >= keyWait)
}

// wakeIn is how long until ready may turn true by the clock alone (or
// longest: no such wait; a write in flight wakes the run with its results).
func (k *bulkKeys) wakeIn(now time.Time, longest time.Duration) time.Duration {
	if len(k.waiting) == 0 || k.sealing == 0 || k.inflight.Load() > 0 {
		return longest
	}
	return min(longest, max(k.since.Add(keyWait).Sub(now), 0))
}

// write starts the writes of every waiting unit, in goroutines of l's.
func (k *bulkKeys) write(ctx context.Context, l *multi) {
	batch := k.waiting
	k.waiting = nil
	max := max(k.intents.MaxBulkUnits(), 1)
	for len(batch) > 0 {
		// Units of one key share its target and deadline.
		head := batch[0].a
		var part, rest []awaiting
		for _, w := range batch {
			if len(part) < max && w.a.Target == head.Target && w.a.DeadlineMs == head.DeadlineMs {
				part = append(part, w)
			} else {
				rest = append(rest, w)
			}
		}
		batch = rest
		k.inflight.Add(1)
		l.async.Add(1)
		go func() {
			defer l.async.Done()
			res := k.writeKey(ctx, part)
			k.inflight.Add(-1) // before its results wake the run
			for _, r := range res {
				l.queue.push(r)
			}
		}()
	}
}

// writeKey writes one key for units, leaving out those whose record went
// stale and trying again under a new id with the rest; it returns each
// unit's result.
func (k *bulkKeys) writeKey(ctx context.Context, units []awaiting) []tagged {
	out := make([]tagged, 0, len(units))
	for len(units) > 0 {
		a := units[0].a
		b := authority.BulkIntent{Source: k.self, Target: a.Target.Owner, TargetNode: a.Target.Node, DeadlineMs: a.DeadlineMs}
		for _, w := range units {
			b.Units = append(b.Units, w.a.Unit)
		}
		k.mu.Lock()
		id := fmt.Sprintf("%s.%d", k.base, k.next)
		k.next++
		k.mu.Unlock()
		res, err := k.intents.WriteBulkIntent(ctx, id, b)
		switch {
		case err != nil:
			return append(out, each(units, relocation.BulkIntentResult{Err: err})...)
		case res.Written:
			k.mu.Lock()
			k.written[id] = res.Revision
			k.mu.Unlock()
			return append(out, each(units, relocation.BulkIntentResult{Written: true, ID: id})...)
		}
		stale := make(map[string]bool, len(res.Stale))
		for _, o := range res.Stale {
			stale[o] = true
		}
		// A failed compare that names no object (it cannot happen: the
		// key is new, the source alive) fails them all, not again.
		none := len(stale) == 0
		var rest []awaiting
		for _, w := range units {
			cur, found := res.Current[w.a.Unit.Object]
			switch {
			case none || stale[w.a.Unit.Object] || !res.OwnerAlive || res.Exists:
				out = append(out, tagged{id: w.u.id, ev: relocation.BulkIntentResult{Current: cur, Found: found, OwnerAlive: res.OwnerAlive}})
			default:
				rest = append(rest, w)
			}
		}
		units = rest
	}
	return out
}

// each is ev for every unit.
func each(units []awaiting, ev relocation.Event) []tagged {
	out := make([]tagged, len(units))
	for i, w := range units {
		out[i] = tagged{id: w.u.id, ev: ev}
	}
	return out
}

// deleteAll deletes every key the run wrote, once all its units ended.
// A key left behind (a failed delete, a stopped run) is the recovery
// controller's sweep's to remove after its deadline.
func (k *bulkKeys) deleteAll(ctx context.Context) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for id, rev := range k.written {
		_, _ = k.intents.DeleteBulkIntent(ctx, id, rev, k.self)
	}
	k.written = nil
}
