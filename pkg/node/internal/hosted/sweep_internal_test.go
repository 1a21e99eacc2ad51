package hosted

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/node/config"
	"github.com/meshloc/meshloc/pkg/wire"
)

// tickClock is a clock whose ticker fires when the test sends on tick.
type tickClock struct {
	clock.Clock
	tick chan time.Time
}

func (c tickClock) NewTicker(time.Duration) clock.Ticker { return tickTicker{c.tick} }

type tickTicker struct{ c chan time.Time }

func (t tickTicker) C() <-chan time.Time { return t.c }
func (tickTicker) Stop()                 {}

// The sweep prunes every hosted object's replies once the window passed
// them, and keeps those still inside it.
func TestSweepPrunesIdleReplies(t *testing.T) {
	c := tickClock{Clock: clock.Real(), tick: make(chan time.Time)}
	n := &Env{cfg: &config.Config{DedupWindow: time.Minute}, clock: c}
	t0 := time.Now()
	old, young := &Object{Replies: actor.NewReplyTable(time.Minute, 0)}, &Object{Replies: actor.NewReplyTable(time.Minute, 0)}
	old.Replies.Record(wire.NewOperationID(), actor.Reply{}, t0) // before the sweep runs
	objs := []*Object{old, young, {}}                            // the last: not activated, no table
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { n.Sweep(ctx, func() []*Object { return objs }, 0, nil) })
	young.Mu.Lock()
	young.Replies.Record(wire.NewOperationID(), actor.Reply{}, t0)
	young.Mu.Unlock()
	sweep := func(at time.Time) (int, int) {
		c.tick <- at
		c.tick <- at // the first sweep has ended when the loop takes the second
		old.Mu.Lock()
		defer old.Mu.Unlock()
		young.Mu.Lock()
		defer young.Mu.Unlock()
		return old.Replies.Len(), young.Replies.Len()
	}
	if a, b := sweep(t0.Add(30 * time.Second)); a != 1 || b != 1 {
		t.Fatalf("inside the window: %d and %d replies kept, want 1 and 1", a, b)
	}
	if a, b := sweep(t0.Add(2 * time.Minute)); a != 0 || b != 0 {
		t.Fatalf("after the window: %d and %d replies kept", a, b)
	}
	cancel()
	wg.Wait()
}
