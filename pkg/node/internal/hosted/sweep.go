package hosted

import (
	"context"
	"sync"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/lifecycle"
)

// sleepsInFlight bounds the sleeps one sweep runs at once (each is one
// etcd transaction; a batched store shares round trips between them).
const sleepsInFlight = 64

// Sweep does a node's periodic work on its hosted objects (objects lists
// them) until ctx ends:
//
//   - once per de-duplication window it prunes every reply table, so an
//     object nobody calls any more holds no replies (a table is pruned
//     otherwise only when its object records a new reply). Nothing a
//     caller can observe changes: a pruned reply had expired already.
//     Then it calls also (nil: nothing), the node's own pruning;
//   - every sleepTick (0: never) it puts the objects the sleep rule allows
//     to sleep (sleep.go), sleepsInFlight at a time;
//   - with memory limits, every pressureTick it looks at the load and
//     sheds the least recently used objects over the soft bound
//     (pressure.go).
func (n *Env) Sweep(ctx context.Context, objects func() []*Object, sleepTick time.Duration, also func()) {
	window := n.cfg.DedupWindow
	if window <= 0 {
		window = actor.DefaultReplyWindow
	}
	prune := n.clock.NewTicker(window)
	defer prune.Stop()
	var sleepC, pressC <-chan time.Time
	if sleepTick > 0 {
		t := n.clock.NewTicker(sleepTick)
		defer t.Stop()
		sleepC = t.C()
	}
	if n.limits().Enabled() {
		t := n.clock.NewTicker(pressureTick)
		defer t.Stop()
		pressC = t.C()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-prune.C():
			for _, h := range objects() {
				h.PruneReplies(now)
			}
			if also != nil {
				also()
			}
		case now := <-sleepC:
			n.sleepIdle(ctx, objects(), now)
		case now := <-pressC:
			n.relieve(ctx, objects(), now)
		}
	}
}

// sleepIdle puts to sleep those of objs the rule allows to at now.
func (n *Env) sleepIdle(ctx context.Context, objs []*Object, now time.Time) {
	idle := make([]*Object, 0, len(objs)/8)
	for _, h := range objs {
		if h.MaySleep(now, false) == lifecycle.Sleep {
			idle = append(idle, h)
		}
	}
	n.sleepAll(ctx, idle, false)
}

// sleepAll puts objs to sleep, sleepsInFlight at a time; pressed: for the
// memory limits (lifecycle.Facts.Pressed).
func (n *Env) sleepAll(ctx context.Context, objs []*Object, pressed bool) {
	sem := make(chan struct{}, sleepsInFlight)
	var wg sync.WaitGroup
	for _, h := range objs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := h.Sleep(ctx, pressed); err != nil {
				n.log.Debug().Err(err).Str("object", h.name).Msg("sleep failed: the object stays awake")
			}
		})
	}
	wg.Wait()
}

// SleepTick is how often a node looks for idle objects: a quarter of the
// shortest idle bound of the types it hosts (nodeDefault for types that
// set none), within [10ms, 30s]; 0 when none of them sleeps.
func SleepTick(types []actor.Type, nodeDefault time.Duration) time.Duration {
	least := time.Duration(0)
	for _, t := range types {
		if !t.Sleeps() {
			continue
		}
		if a := lifecycle.SleepAfter(t.SleepAfter, nodeDefault); a > 0 && (least == 0 || a < least) {
			least = a
		}
	}
	if least == 0 {
		return 0
	}
	return min(max(least/4, 10*time.Millisecond), 30*time.Second)
}
