package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshloc/meshloc/internal/freeport"
	"github.com/meshloc/meshloc/internal/promscrape"
)

// lifecycleMaxObjects is the baseline of the memory-limit part: the bound.
const lifecycleMaxObjects = "lifecycle: the node's --max-objects"

// lifecyclePressure is the memory-limit part of the lifecycle section: a
// lone node with --max-objects count/2 (and no idle sleeping) while count
// durable counters are made through it, 64 in flight. It sheds its least
// recently used objects to sleep over 90% of the bound and refuses new
// ones at it (the client retries); the figure is the most objects it held
// awake, sampled every 100 ms, beside the bound (at most 1×).
func (x *run) lifecyclePressure(ctx context.Context, m *mesh, count int) error {
	bound := count / 2
	web, err := freeport.Addr()
	if err != nil {
		return err
	}
	n, cl, err := loneNode(ctx, m, "n1", web, x.lifeArgs("--max-objects", fmt.Sprint(bound))...)
	if err != nil {
		return err
	}
	defer n.kill()
	defer cl.Close()
	x.base(Measure{Name: lifecycleMaxObjects, Value: float64(bound), Unit: "objects", N: 1})
	x.step("lifecycle: making %d dcounters on a node with --max-objects %d", count, bound)
	var peak atomic.Int64
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for sctx.Err() == nil {
			if h, err := hostedObjects(sctx, web); err == nil && int64(h) > peak.Load() {
				peak.Store(int64(h))
			}
			_ = recSleep(sctx, 100*time.Millisecond)
		}
	})
	t0 := time.Now()
	err = activateCounters(ctx, cl, "actor/dcounter/m", count, 64)
	took := time.Since(t0)
	stop()
	wg.Wait()
	if err != nil {
		return err
	}
	held, _ := hostedObjects(ctx, web)
	shed, _ := promscrape.Sum(ctx, web, "meshloc_pressure_sleeps_total")
	refused, _ := promscrape.Sum(ctx, web, "meshloc_activation_refusals_total")
	rss, _ := n.rss()
	x.fig(Measure{Name: fmt.Sprintf("lifecycle: most objects awake while %d were made on a node with --max-objects %d", count, bound),
		Value: float64(peak.Load()), Unit: "objects", N: int64(count),
		Note: fmt.Sprintf("made at %.0f/s; %d awake at the end; %.0f put to sleep over 90%%, %.0f first calls refused and retried; RSS %d MiB",
			float64(count)/took.Seconds(), held, shed, refused, rss>>20)}, lifecycleMaxObjects, le(1))
	return nil
}
