package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/meshloc/meshloc/internal/promscrape"

	"github.com/meshloc/meshloc/internal/freeport"
)

// The lifecycle section (opt-in: --only lifecycle) measures objects that
// sleep and wake (docs/developing/lifecycle.md) on a cluster of its own:
// node children (meshnode, --sleep-after LifecyclePlan.SleepAfter, which
// every built-in durable type takes), one at a time but for the last
// part's two, on an embedded etcd.
//
//   - durable write p50: one caller adding to 64 awake dcounters in turn
//     (the baseline of a wake);
//   - p.Objects dcounters made by first calls (64 in flight), then left
//     idle until the node hosts none: how fast they went to sleep;
//   - the node's resident set with all of them asleep, after p.Settle,
//     beside the same node's with none (the bound: 1.2×);
//   - wake + call p50: one caller calling 2,000 of the sleeping objects
//     once each, beside the durable write p50 (the bound: 2×);
//   - deletes/s of all of them, 64 in flight, beside etcd's CAS/s on the
//     same etcd (the bound: 0.5×; lifecycle_delete.go);
//   - a node with --max-objects p.Objects/2 while p.Objects are made
//     through it: the most it held awake (the bound: 1×;
//     lifecycle_pressure.go);
//   - p.Objects one-shot reminders due over 60 s (at 100,000) on two
//     nodes, one killed -9 halfway: each fired exactly once, lateness
//     p99 (the bound: 1 s; lifecycle_reminders.go).

// LifecyclePlan sizes the lifecycle section.
type LifecyclePlan struct {
	// Objects made and put to sleep (100,000).
	Objects int
	// SleepAfter is the node's --sleep-after (5 s).
	SleepAfter time.Duration
	// Settle is how long the node stays idle before its resident set is
	// read (130 s, as the scale section's memory part).
	Settle time.Duration
	// RemindersOnly runs the reminders part alone (its first calls/s
	// assumed, not measured: remindersRate).
	RemindersOnly bool
	// StateStore is where the section's nodes keep durable state: "" or
	// "etcd" (the default store), or "postgres": a server the section
	// launches (lifecycle_store.go) that every node names in --state-store.
	StateStore string
}

// remindersRate is the first calls/s the reminders part alone assumes.
const remindersRate = 2000

// DefaultLifecycle is the plan the figures are stated at (its
// million objects: meshctl bench --lifecycle-objects 1000000).
func DefaultLifecycle() LifecyclePlan {
	return LifecyclePlan{Objects: 100_000, SleepAfter: 5 * time.Second, Settle: 130 * time.Second}
}

const (
	lifecycleWriteP50 = "lifecycle: durable write p50 (an awake dcounter's add)"
	lifecycleRSSNone  = "lifecycle: node RSS with no object"
	lifecycleWakes    = 2000
)

func (x *run) lifecycle() error {
	p, def := x.cfg.Plan.Lifecycle, DefaultLifecycle()
	if p.Objects <= 0 {
		p.Objects = def.Objects
	}
	if p.SleepAfter <= 0 {
		p.SleepAfter = def.SleepAfter
	}
	if p.Settle <= 0 {
		p.Settle = def.Settle
	}
	m, done, err := x.scaleCluster("lifecycle", nil)
	if err != nil {
		return err
	}
	defer done()
	ctx := x.ctx
	stop, err := x.lifecycleStore(ctx, p.StateStore)
	if err != nil {
		return err
	}
	defer stop()
	if p.RemindersOnly {
		return x.lifecycleReminders(ctx, m, p, remindersRate)
	}
	web, err := freeport.Addr()
	if err != nil {
		return err
	}
	n1, cl, err := loneNode(ctx, m, "n1", web, x.lifeArgs("--sleep-after", p.SleepAfter.String())...)
	if err != nil {
		return err
	}
	defer n1.kill()
	defer cl.Close()

	// The durable write baseline, on 64 objects kept awake by the calls.
	var writes []time.Duration
	for i := range 3000 {
		t0 := time.Now()
		if _, err := cl.Call(ctx, "actor/dcounter/w"+strconv.Itoa(i%64), "add", "1"); err != nil {
			return fmt.Errorf("bench: lifecycle: durable add: %w", err)
		}
		if i >= 64 { // the first call of each activates it
			writes = append(writes, time.Since(t0))
		}
	}
	x.base(Measure{Name: lifecycleWriteP50, Value: ms(pct(writes, 50)), Unit: "ms", N: int64(len(writes))})
	if err := x.waitHosted(ctx, web, n1, 0, p.SleepAfter*4+time.Minute); err != nil {
		return err
	}
	if err := recSleep(ctx, 2*time.Second); err != nil {
		return err
	}
	none, err := n1.rss()
	if err != nil {
		return err
	}
	noneInuse, _ := promscrape.Sum(ctx, web, "go_memstats_heap_inuse_bytes")
	x.base(Measure{Name: lifecycleRSSNone, Value: float64(none) / (1 << 20), Unit: "MiB", N: 1})

	x.step("lifecycle: making %d dcounters (node RSS %d MiB with none)", p.Objects, none>>20)
	t0 := time.Now()
	if err := activateCounters(ctx, cl, "actor/dcounter/s", p.Objects, 64); err != nil {
		return err
	}
	made := time.Since(t0)
	x.step("lifecycle: %d made in %s; waiting until all sleep", p.Objects, made.Round(time.Millisecond))
	t1 := time.Now()
	if err := x.waitHosted(ctx, web, n1, 0, p.SleepAfter+time.Duration(p.Objects/50)*time.Millisecond+5*time.Minute); err != nil {
		return err
	}
	asleep := time.Since(t1)
	x.fig(Measure{Name: fmt.Sprintf("lifecycle: %d idle durable objects asleep, after --sleep-after %s", p.Objects, p.SleepAfter),
		Value: asleep.Seconds(), Unit: "s", N: int64(p.Objects),
		Note: fmt.Sprintf("from the last first call until the node hosts none; made at %.0f/s", float64(p.Objects)/made.Seconds())}, "", nil)
	x.step("lifecycle: all asleep in %s; idle for %s", asleep.Round(time.Millisecond), p.Settle)
	if err := recSleep(ctx, p.Settle); err != nil {
		return err
	}
	rss, err := n1.rss()
	if err != nil {
		return err
	}
	inuse, _ := promscrape.Sum(ctx, web, "go_memstats_heap_inuse_bytes")
	x.step("lifecycle: node RSS %.1f MiB with %d asleep (%.1f MiB with none); Go heap in use %.1f MiB (%.1f MiB)",
		float64(rss)/(1<<20), p.Objects, float64(none)/(1<<20), inuse/(1<<20), noneInuse/(1<<20))
	x.fig(Measure{Name: fmt.Sprintf("lifecycle: node RSS with %d durable objects asleep", p.Objects), Value: float64(rss) / (1 << 20), Unit: "MiB", N: 1,
		Note: fmt.Sprintf("%.1f KiB per sleeping object over the node with none; Go heap in use %.1f MiB (%.1f MiB with none)",
			float64(rss-none)/float64(p.Objects)/1024, inuse/(1<<20), noneInuse/(1<<20))},
		lifecycleRSSNone, le(1.2))

	// Wake + call: one caller, each call wakes one sleeping object.
	var wakes []time.Duration
	step := max(1, p.Objects/lifecycleWakes)
	for i := 0; i < p.Objects && len(wakes) < lifecycleWakes; i += step {
		t0 := time.Now()
		r, err := cl.Call(ctx, "actor/dcounter/s"+strconv.Itoa(i), "get")
		if err != nil {
			return fmt.Errorf("bench: lifecycle: wake s%d: %w", i, err)
		}
		wakes = append(wakes, time.Since(t0))
		if !strings.Contains(string(r.Payload), `"value":1`) {
			return fmt.Errorf("bench: lifecycle: s%d woke with %s, want its value 1", i, r.Payload)
		}
	}
	x.fig(Measure{Name: "lifecycle: call p50 to a sleeping object (wake + call)", Value: ms(pct(wakes, 50)), Unit: "ms", N: int64(len(wakes)),
		Note: fmt.Sprintf("p99 %.2f ms", ms(pct(wakes, 99)))}, lifecycleWriteP50, le(2))
	// Deletes: the objects the wakes did not touch are asleep still.
	if err := x.lifecycleDeletes(ctx, m, "s", p.Objects); err != nil {
		return err
	}
	_ = n1.stop(30 * time.Second) // its owner key goes: the next node is alone
	if err := x.lifecyclePressure(ctx, m, p.Objects); err != nil {
		return err
	}
	return x.lifecycleReminders(ctx, m, p, float64(p.Objects)/made.Seconds())
}

// waitHosted waits until the node child serving HTTP at web hosts want
// objects (its meshloc_hosted_objects), at most within.
func (x *run) waitHosted(ctx context.Context, web string, c *child, want int, within time.Duration) error {
	deadline := time.Now().Add(within)
	last := -1
	for {
		n, err := hostedObjects(ctx, web)
		if err == nil && n == want {
			return nil
		}
		if err == nil {
			last = n
		}
		select {
		case <-c.exited:
			return fmt.Errorf("bench: the node child exited: %v: %s", c.err, c.stderr())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the node hosts %d objects after %s, want %d (%v)", last, within, want, err)
		}
		if err := recSleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
}

// hostedObjects reads meshloc_hosted_objects off a node's /metrics.
func hostedObjects(ctx context.Context, web string) (int, error) {
	v, err := promscrape.Sum(ctx, web, "meshloc_hosted_objects")
	return int(v), err
}
