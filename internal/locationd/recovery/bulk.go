package recovery

import (
	"context"
	"time"

	"github.com/meshloc/meshloc/pkg/authority"
)

// Bulk moves under the one-write rule (docs/proposals/one-write-bulk-moves.md)
// keep their objects' intents in the bulk's key, not in the records: an
// orphan a live bulk intent names, at the store version it was sealed at,
// may still be committed by the intent's target, with its state. It is
// left to that target, as an orphan whose record carries an intent is,
// until the intent's deadline plus the grace; then the key is swept.

// bulkSweepEvery is how often a leader sweeps expired bulk intents, those
// no orphan brought up (a source stopped mid-bulk whose objects all
// moved, a write that landed after its source gave up on it).
const bulkSweepEvery = 30 * time.Second

// sweepLoop sweeps expired bulk intents every bulkSweepEvery, for as long
// as the term lasts.
func (c *Controller) sweepLoop(ctx context.Context) {
	st := authority.New(c.cli, c.keys)
	t := time.NewTicker(bulkSweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// A failed sweep is tried again at the next tick.
			_, _, _ = st.SweepBulkIntents(ctx, c.now().UnixMilli(), c.cfg.Grace.Milliseconds())
		}
	}
}

// bulkMove is where a bulk intent moves one object.
type bulkMove struct {
	target       authority.OwnerRef
	deadlineMs   int64
	storeVersion int64
}

// bulkMoves reads the bulk intents etcd holds: the objects they move,
// by name. Those whose deadline and grace passed are swept instead.
func (c *Controller) bulkMoves(ctx context.Context, st *authority.Store) (map[string]bulkMove, error) {
	all, _, err := st.ListBulkIntents(ctx)
	if err != nil {
		return nil, err
	}
	now, grace := c.now().UnixMilli(), c.cfg.Grace.Milliseconds()
	moves := map[string]bulkMove{}
	expired := false
	for _, b := range all {
		if b.Intent.DeadlineMs+grace < now {
			expired = true
			continue
		}
		for _, u := range b.Intent.Units {
			moves[u.Object] = bulkMove{target: b.Intent.Target, deadlineMs: b.Intent.DeadlineMs, storeVersion: u.StoreVersion}
		}
	}
	if expired {
		// A failed sweep is tried again at the next step that lists them.
		_, _, _ = st.SweepBulkIntents(ctx, now, grace)
	}
	return moves, nil
}

// movingInBulk reports whether snap's object is moving in a live bulk
// intent to a live target that may still commit it.
func (c *Controller) movingInBulk(v *view, moves map[string]bulkMove, snap authority.Snapshot) bool {
	m, ok := moves[snap.Object.String()]
	return ok && m.storeVersion == snap.StoreVersion && v.alive(m.target) &&
		c.now().Before(time.UnixMilli(m.deadlineMs).Add(c.cfg.Grace))
}
