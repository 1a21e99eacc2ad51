package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshloc/meshloc/internal/bench/baseline"

	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
)

// scaleDrain is the scale section's drain part, with the first-call
// activations it starts from: one node (n1, default flags) alone while
// p.Objects idle counters are created through the Go client, 64 calls in
// flight (activations/s); then n2 and n3 join and n1 is drained with its
// default options (objects moved per second; moved and failed in the
// note). The baseline of both is the etcd CAS rate of 64 clients on the
// same etcd, measured before the activations and again before the drain
// (the mean of the two windows).
func (x *run) scaleDrain(p ScalePlan) error {
	m, done, err := x.scaleCluster("drain", nil)
	if err != nil {
		return err
	}
	defer done()
	ctx := x.ctx
	var cas, casTime int64
	window := func() error {
		n, el, err := baseline.CASRate(ctx, m.ec, "/bench/scale-cas", 64, 3*time.Second)
		cas, casTime = cas+n, casTime+int64(el)
		return err
	}
	if err := window(); err != nil {
		return err
	}
	if err := m.startNode(ctx, "n1", defaultFlags); err != nil {
		return err
	}
	c, err := client.New(ctx, client.Config{Etcd: m.ec, Timeout: 2 * time.Minute})
	if err != nil {
		return err
	}
	defer c.Close()
	x.step("scale: drain: activating %d counters on n1", p.Objects)
	t0 := time.Now()
	if err := activateCounters(ctx, c, "actor/counter/s", p.Objects, 64); err != nil {
		return err
	}
	act := time.Since(t0)
	for _, name := range []string{"n2", "n3"} {
		if err := m.startNode(ctx, name, defaultFlags); err != nil {
			return err
		}
	}
	if err := window(); err != nil {
		return err
	}
	casName := "etcd CAS/s, 64 clients, scale cluster"
	x.base(Measure{Name: casName, Value: float64(cas) / time.Duration(casTime).Seconds(), Unit: "/s", N: cas})
	x.fig(Measure{Name: fmt.Sprintf("first-call activations/s, %d counters, 64 in flight", p.Objects),
		Value: float64(p.Objects) / act.Seconds(), Unit: "/s", N: int64(p.Objects)}, casName, ge(0.4))
	x.step("scale: drain: draining n1 (%d objects) onto n2 and n3, default options", p.Objects)
	rep, err := m.nodes["n1"].Drain(ctx, node.DrainOptions{})
	if err != nil {
		return err
	}
	note := fmt.Sprintf("moved %d, failed %d in %.1f s, %d bulk moves", len(rep.Moved), len(rep.Failed), rep.Duration.Seconds(), rep.Bulks)
	if rep.EndedEarly != "" {
		note += "; ended early: " + rep.EndedEarly
	}
	x.fig(Measure{Name: fmt.Sprintf("drain of a node holding %d idle objects, objects/s", p.Objects),
		Value: float64(len(rep.Moved)) / rep.Duration.Seconds(), Unit: "/s", N: int64(len(rep.Moved)), Note: note}, casName, ge(1))
	return nil
}

// defaultFlags gives a scale part's node meshnode's defaults (the bench's
// mesh tunes its nodes: a longer relocation timeout, no HTTP).
func defaultFlags(c *node.Config) {
	d := node.DefaultConfig()
	c.LeaseTTL, c.RelocationTimeout = d.LeaseTTL, d.RelocationTimeout
}

// activateCounters makes count counters prefix0.. live with one add each,
// inflight calls at a time.
func activateCounters(ctx context.Context, c *client.Client, prefix string, count, inflight int) error {
	return inParallel(count, inflight, func(i int) error {
		if _, err := c.Call(ctx, prefix+strconv.Itoa(i), "add", "1"); err != nil {
			return fmt.Errorf("bench: activate %s%d: %w", prefix, i, err)
		}
		return nil
	})
}

// inParallel runs f(0)..f(count-1), inflight at a time, until the first
// error (returned).
func inParallel(count, inflight int, f func(i int) error) error {
	var next atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range inflight {
		wg.Go(func() {
			for first.Load() == nil {
				i := int(next.Add(1)) - 1
				if i >= count {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	err, _ := first.Load().(error)
	return err
}
