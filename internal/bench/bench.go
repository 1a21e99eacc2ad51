// Package bench measures meshloc against the physical limits of the machine
// it runs on and against what users do instead, side by side in one run
// (`meshctl bench`). Machines are shared and noisy: every claim is a ratio
// to a baseline measured in the same run, never an absolute number.
//
// Baselines: etcd single-key CAS latency and its rate with 64 clients, an
// 8-key transaction, loopback TCP with one connection, CRC32C, raw gRPC
// unary latency and rate, and "stop, persist to etcd, re-activate
// elsewhere" (the Akka/Dapr way to move an object) for each state size.
//
// meshloc figures: interruption (seal on the source to admission on the
// target, when the target serves the first call) for 1 KiB, 1 MiB and 64 MiB
// states with and without a call load; relocations per second with 1, 8 and
// 64 in flight; objects per second moved in groups of 8; streaming GiB/s of a
// 256 MiB state; calls per second and latency direct and through a gateway,
// with and without a relocation storm; a session's call and push latency
// through a gateway, idle and while its object moves; the interruption of
// a 64 MiB state taking writes, with pre-copy and without; messages per
// second and the cross-node share of 1,000 pairs of objects that message each
// other, before and after one co-location rebalance. Each figure has its baseline, the
// ratio, and the target where there is one, marked met or not.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshloc/meshloc/internal/bench/baseline"
	"github.com/meshloc/meshloc/internal/bench/durablebench"
	"github.com/meshloc/meshloc/internal/bench/tracebench"

	"github.com/meshloc/meshloc/internal/bench/report"
	"github.com/meshloc/meshloc/pkg/node"
)

// Size is one state size the interruption figures and the
// stop-persist-reload peer are measured for.
type Size struct {
	Label string
	Bytes int
	// Moves is how many relocations are measured idle, and again under load.
	Moves int
	// Peer is how many stop-persist-reload moves are measured.
	Peer int
}

// Plan is how much a run measures.
type Plan struct {
	Name string
	// Ops is the number of serial operations behind each latency baseline
	// (etcd CAS, 8-key txn, raw gRPC) and each call-latency figure.
	Ops int
	// Window is how long each rate (CAS/s, relocations/s, calls/s) runs.
	Window time.Duration
	Sizes  []Size
	// Stream is the state size of the streaming figure.
	Stream int
	// Groups are the numbers of group relocations in flight the groups
	// figure is the best of (default 8 and 64, as single moves are the best
	// of 1, 8 and 64 in flight).
	Groups []int
	// Pairs of objects that message each other in the colocate section
	// (default 1000).
	Pairs int
	// Scale sizes the scale section (zero: DefaultScale).
	Scale ScalePlan
	// Lifecycle sizes the lifecycle section (zero: DefaultLifecycle).
	Lifecycle LifecyclePlan
	// Durable sizes the durable section (zero: durablebench.DefaultPlan).
	Durable durablebench.Plan
	// Tracing sizes the tracing section (zero: tracebench.DefaultPlan).
	Tracing tracebench.Plan
}

// FullPlan is the default: about 90 s on two cores.
func FullPlan() Plan {
	return Plan{Name: "full", Ops: 3000, Window: 5 * time.Second, Stream: 256 << 20, Sizes: []Size{
		{"1 KiB", 1 << 10, 1000, 500}, {"1 MiB", 1 << 20, 150, 60}, {"64 MiB", 64 << 20, 16, 10},
	}}
}

// QuickPlan runs in under a minute, with fewer samples behind each number.
func QuickPlan() Plan {
	return Plan{Name: "quick", Ops: 200, Window: time.Second, Stream: 256 << 20, Sizes: []Size{
		{"1 KiB", 1 << 10, 60, 40}, {"1 MiB", 1 << 20, 12, 8}, {"64 MiB", 64 << 20, 2, 2},
	}}
}

// Config of a run.
type Config struct {
	Plan Plan
	// Dir holds the embedded etcd's data (default: a new temporary
	// directory, removed at the end).
	Dir string
	// Progress, when set, gets one line as each step starts.
	Progress io.Writer
	// Only, when not empty, runs only these sections (Sections): a figure
	// whose baseline is in a section left out has no ratio and misses its
	// target.
	Only []string
	// TLS runs the mesh secured: mutual TLS between nodes and clients, etcd
	// over TLS with certificate authentication (meshctl bench --tls runs
	// the plan both ways; Compare puts the two side by side).
	TLS bool
	// Tune, when set, changes the nodes' configuration (an A/B of a
	// feature: meshctl bench --eager-cutover-bytes, --batch-writes).
	Tune func(*node.Config)
	// PeersDir is the peers section's Proto.Actor program (default:
	// bench/peers above the working directory).
	PeersDir string
}

// Sections are the parts of a run, in the order they run.
//
// The interruption section runs last: the peer's large state writes stay in
// etcd's in-memory raft log for a while, and in this one process the heap
// they leave behind (hundreds of MiB) slows the figures measured after it.
var Sections = []string{"etcd", "calls", "sessions", "relocations", "groups", "streaming", "interruption", "precopy", "colocate", "scale", "peers", "lifecycle", "durable", "tracing"}

// OptIn are the sections a run makes only when --only names them: each
// builds its own cluster; scale takes many minutes (scale.go), peers
// builds and runs a Proto.Actor cluster from the source tree (peers.go),
// lifecycle puts 100,000 objects to sleep and wakes them (lifecycle.go),
// durable launches PostgreSQL (durable.go), tracing starts nine nodes
// one after another (tracing.go).
var OptIn = []string{"scale", "peers", "lifecycle", "durable", "tracing"}

// selected reports whether the run makes section s.
func (c Config) selected(s string) bool {
	if len(c.Only) == 0 {
		return !slices.Contains(OptIn, s)
	}
	return slices.Contains(c.Only, s)
}

type run struct {
	cfg Config
	ctx context.Context
	dir string // the run's directory: the scale parts make theirs in it
	m   *mesh  // the shared mesh (nil when only opt-in sections run)
	r   *Report
	// lifeStore are the lifecycle section's nodes' --state-store flags
	// (none: the etcd store).
	lifeStore []string
}

func (x *run) step(format string, a ...any) {
	if x.cfg.Progress != nil {
		fmt.Fprintf(x.cfg.Progress, "bench: "+format+"\n", a...)
	}
}

func (x *run) base(m Measure) { x.r.Baselines = append(x.r.Baselines, m) }
func (x *run) fig(m Measure, b string, t *Target) {
	x.r.Figures = append(x.r.Figures, report.NewFigure(m, x.lookup(b), t))
}

// lookup finds a baseline, or a figure used as the baseline of another.
func (x *run) lookup(name string) Measure {
	if b := x.r.Baseline(name); b.Unit != "" {
		return b
	}
	return x.r.Figure(name)
}

var le, ge = report.AtMost, report.AtLeast

// Run measures everything in cfg.Plan and returns the report. An error means
// a measurement could not be made (etcd or a node failed), not that a target
// was missed: see Report.Missed.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Plan.Name == "" {
		cfg.Plan = FullPlan()
	}
	if cfg.Plan.Ops < 2 || cfg.Plan.Window <= 0 || cfg.Plan.Stream <= 0 || len(cfg.Plan.Sizes) == 0 {
		return nil, errors.New("bench: a plan needs Ops ≥ 2, a Window, a Stream size and Sizes")
	}
	for _, o := range cfg.Only {
		if !slices.Contains(Sections, o) {
			return nil, fmt.Errorf("bench: no section %q (sections: %s)", o, strings.Join(Sections, ", "))
		}
	}
	if cfg.selected("durable") {
		if err := durablebench.Check(); err != nil {
			return nil, err // before any other section runs
		}
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "meshloc-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	x := &run{cfg: cfg, ctx: ctx, dir: dir, r: &Report{Started: time.Now(), Plan: cfg.Plan.Name, Machine: report.ThisMachine(), TLS: cfg.TLS}}
	if slices.ContainsFunc(Sections, func(s string) bool { return cfg.selected(s) && !slices.Contains(OptIn, s) }) {
		x.step("starting embedded etcd, nodes n1 and n2, gateway gw (mutual TLS: %v)", cfg.TLS)
		m, err := startMesh(ctx, dir, cfg.TLS, cfg.Tune)
		if err != nil {
			return nil, err
		}
		defer m.close()
		x.m = m
	}
	for i, f := range []func() error{x.etcdBaselines, x.calls, x.sessions, x.relocationRates, x.groups, x.streaming, x.interruption, x.precopy, x.colocate, x.scale, x.peers, x.lifecycle, x.durable, x.tracing} {
		if !cfg.selected(Sections[i]) {
			continue
		}
		if err := f(); err != nil {
			return x.r, err
		}
		if err := ctx.Err(); err != nil {
			return x.r, err
		}
	}
	x.r.Seconds = time.Since(x.r.Started).Seconds()
	return x.r, nil
}

func (x *run) etcdBaselines() error {
	p := x.cfg.Plan
	x.step("etcd: %d serial 8-key transactions; CRC32C", p.Ops)
	t8, err := baseline.Txn8Serial(x.ctx, x.m.ec, "/bench/txn8", p.Ops)
	if err != nil {
		return err
	}
	n := int64(len(t8))
	x.base(Measure{Name: "etcd 8-key txn p50", Value: ms(pct(t8, 50)), Unit: "ms", N: n})
	x.base(Measure{Name: "etcd 8-key txn p99", Value: ms(pct(t8, 99)), Unit: "ms", N: n})
	x.base(Measure{Name: "CRC32C", Value: baseline.CRCThroughput(64 << 20), Unit: "GiB/s", N: 64 << 20})
	return nil
}

// The baselines a target is judged against are measured interleaved with
// the figure (a CAS between two relocations, a raw gRPC call between two
// meshloc calls, alternating rate windows), so that a burst of load from
// elsewhere on a shared machine falls on both.

// alternate runs each f for d/rounds, in turn, rounds times, and returns
// each one's successes and failures per second of its own windows.
func alternate(rounds int, d time.Duration, fs ...func(time.Duration) (ok, failed int64, el time.Duration, err error)) ([]float64, []int64, []int64, error) {
	rates := make([]float64, len(fs))
	oks, fails := make([]int64, len(fs)), make([]int64, len(fs))
	els := make([]time.Duration, len(fs))
	for range rounds {
		for i, f := range fs {
			ok, failed, el, err := f(d / time.Duration(rounds))
			if err != nil {
				return nil, nil, nil, err
			}
			oks[i] += ok
			fails[i] += failed
			els[i] += el
		}
	}
	for i := range fs {
		if els[i] > 0 {
			rates[i] = float64(oks[i]) / els[i].Seconds()
		}
	}
	return rates, oks, fails, nil
}

// serial runs f n times one after the other and returns the latencies.
func serial(n int, f func() error) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := f(); err != nil {
			return nil, err
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

// concurrent runs f in k goroutines for d and returns how many calls
// succeeded, how many failed, and how long it took.
func concurrent(k int, d time.Duration, f func(worker int) error) (int64, int64, time.Duration, error) {
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range k {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if f(w) != nil {
					failed.Add(1)
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	return ok.Load(), failed.Load(), time.Since(start), nil
}

func failedNote(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d failed", n)
}

// load runs a call load until stop is called: six callers on counters spread
// over n1 and n2, and two on the object being moved (a cheap call).
func (x *run) load(moving string) (stop func() (int64, int64), err error) {
	var counters []string
	for i := range 16 {
		name := fmt.Sprintf("actor/counter/load-%d", i)
		if _, err := x.m.create(x.ctx, name, "add", "1"); err != nil {
			return nil, err
		}
		counters = append(counters, name)
	}
	ctx, cancel := context.WithCancel(x.ctx)
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for ctx.Err() == nil {
				var err error
				if w < 2 {
					_, err = x.m.direct.Call(ctx, moving, "size")
				} else {
					_, err = x.m.direct.Call(ctx, counters[rng.IntN(len(counters))], "add", "1")
				}
				switch {
				case err == nil:
					ok.Add(1)
				case ctx.Err() == nil:
					failed.Add(1)
				}
			}
		})
	}
	return func() (int64, int64) { cancel(); wg.Wait(); return ok.Load(), failed.Load() }, nil
}
