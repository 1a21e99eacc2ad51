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
// with and without a relocation storm. Each figure has its baseline, the
// ratio, and the target where there is one, marked met or not.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/client"
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
}

// FullPlan is the default: about three minutes on two cores.
func FullPlan() Plan {
	return Plan{Name: "full", Ops: 1000, Window: 3 * time.Second, Stream: 256 << 20, Sizes: []Size{
		{"1 KiB", 1 << 10, 300, 200}, {"1 MiB", 1 << 20, 60, 30}, {"64 MiB", 64 << 20, 8, 6},
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
}

type run struct {
	cfg Config
	ctx context.Context
	m   *mesh
	r   *Report
}

func (x *run) step(format string, a ...any) {
	if x.cfg.Progress != nil {
		fmt.Fprintf(x.cfg.Progress, "bench: "+format+"\n", a...)
	}
}

func (x *run) base(m Measure) { x.r.Baselines = append(x.r.Baselines, m) }
func (x *run) fig(m Measure, b string, t *Target) {
	x.r.Figures = append(x.r.Figures, figure(m, x.lookup(b), t))
}

// lookup finds a baseline, or a figure used as the baseline of another.
func (x *run) lookup(name string) Measure {
	if b := x.r.baseline(name); b.Unit != "" {
		return b
	}
	return x.r.figure(name)
}

func le(r float64) *Target { return &Target{Op: "<=", Ratio: r} }
func ge(r float64) *Target { return &Target{Op: ">=", Ratio: r} }

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
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "meshloc-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	x := &run{cfg: cfg, ctx: ctx, r: &Report{Started: time.Now(), Plan: cfg.Plan.Name, Machine: machine()}}
	x.step("starting embedded etcd, nodes n1 and n2, gateway gw")
	m, err := startMesh(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer m.close()
	x.m = m
	for _, f := range []func() error{x.etcdBaselines, x.rawBaselines, x.interruption, x.relocationRates, x.groups, x.streaming, x.calls} {
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
	x.step("etcd: %d serial CAS transactions, %d 8-key transactions, CAS/s with 64 clients for %s", p.Ops, p.Ops, p.Window)
	cas, err := casSerial(x.ctx, x.m.ec, "/bench/cas", p.Ops)
	if err != nil {
		return err
	}
	n := int64(len(cas))
	x.base(Measure{Name: "etcd CAS p50", Value: ms(pct(cas, 50)), Unit: "ms", N: n})
	x.base(Measure{Name: "etcd CAS p99", Value: ms(pct(cas, 99)), Unit: "ms", N: n})
	t8, err := txn8Serial(x.ctx, x.m.ec, "/bench/txn8", p.Ops)
	if err != nil {
		return err
	}
	x.base(Measure{Name: "etcd 8-key txn p50", Value: ms(pct(t8, 50)), Unit: "ms", N: n})
	x.base(Measure{Name: "etcd 8-key txn p99", Value: ms(pct(t8, 99)), Unit: "ms", N: n})
	rate, total, err := casRate(x.ctx, x.m.ec, "/bench/rate", 64, p.Window)
	if err != nil {
		return err
	}
	x.base(Measure{Name: "etcd CAS/s, 64 clients", Value: rate, Unit: "/s", N: total})
	_, err = x.m.ec.Delete(x.ctx, "/bench/", clientv3.WithPrefix())
	return err
}

func (x *run) rawBaselines() error {
	p := x.cfg.Plan
	x.step("loopback TCP (%d MiB, one connection), CRC32C, raw gRPC unary", p.Stream>>20)
	tcp, err := tcpThroughput(p.Stream)
	if err != nil {
		return err
	}
	x.base(Measure{Name: "loopback TCP, 1 connection", Value: tcp, Unit: "GiB/s", N: int64(p.Stream)})
	x.base(Measure{Name: "CRC32C", Value: crcThroughput(64 << 20), Unit: "GiB/s", N: 64 << 20})
	raw, err := startRawGRPC()
	if err != nil {
		return err
	}
	defer raw.close()
	lat, err := serial(p.Ops, func() error { return raw.call(x.ctx) })
	if err != nil {
		return err
	}
	x.base(Measure{Name: "raw gRPC unary p50", Value: ms(pct(lat, 50)), Unit: "ms", N: int64(len(lat))})
	x.base(Measure{Name: "raw gRPC unary p99", Value: ms(pct(lat, 99)), Unit: "ms", N: int64(len(lat))})
	rate, total, failed := concurrent(64, p.Window, func(int) error { return raw.call(x.ctx) })
	x.base(Measure{Name: "raw gRPC calls/s, 64 in flight", Value: rate, Unit: "/s", N: total, Note: failedNote(failed)})
	return nil
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

// concurrent runs f in k goroutines for d and returns the rate of calls
// that succeeded, their number, and how many failed.
func concurrent(k int, d time.Duration, f func(worker int) error) (float64, int64, int64) {
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
	return float64(ok.Load()) / time.Since(start).Seconds(), ok.Load(), failed.Load()
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

func (x *run) interruption() error {
	for _, s := range x.cfg.Plan.Sizes {
		x.step("stop-persist-reload of %s with the plain etcd client: %d moves", s.Label, s.Peer)
		spr, err := newStopPersistReload(x.ctx, x.m.ec, "/bench/spr", s.Bytes)
		if err != nil {
			return err
		}
		var peer []time.Duration
		for range s.Peer {
			d, err := spr.move(x.ctx)
			if err != nil {
				spr.close(x.ctx)
				return err
			}
			peer = append(peer, d)
		}
		spr.close(x.ctx)
		if err := x.compact(); err != nil {
			return err
		}
		peerName := "stop-persist-reload p50, " + s.Label
		x.base(Measure{Name: peerName, Value: ms(pct(peer, 50)), Unit: "ms", N: int64(len(peer))})
		x.base(Measure{Name: "stop-persist-reload p99, " + s.Label, Value: ms(pct(peer, 99)), Unit: "ms", N: int64(len(peer))})

		x.step("interruption of a %s state: %d relocations idle, %d under a call load", s.Label, s.Moves, s.Moves)
		name := fmt.Sprintf("actor/blob/intr-%d", s.Bytes)
		o, err := x.m.create(x.ctx, name, "fill", fmt.Sprint(s.Bytes))
		if err != nil {
			return err
		}
		for _, loaded := range []bool{false, true} {
			var stop func() (int64, int64)
			if loaded {
				if stop, err = x.load(name); err != nil {
					return err
				}
			}
			var intr []time.Duration
			var failed int
			for range s.Moves {
				d, _, err := x.m.move(x.ctx, o)
				if err != nil {
					failed++
					continue
				}
				intr = append(intr, d)
			}
			note := ""
			if failed > 0 {
				note = fmt.Sprintf("%d moves did not complete", failed)
			}
			if stop != nil {
				calls, cfail := stop()
				note = joinNote(note, fmt.Sprintf("load: %d calls", calls), failedNote(cfail))
			}
			if len(intr) == 0 {
				return fmt.Errorf("bench: no relocation of %s completed", name)
			}
			how := "idle"
			if loaded {
				how = "under load"
			}
			p50 := Measure{Name: fmt.Sprintf("interruption p50, %s, %s", s.Label, how), Value: ms(pct(intr, 50)), Unit: "ms", N: int64(len(intr)), Note: note}
			p99 := Measure{Name: fmt.Sprintf("interruption p99, %s, %s", s.Label, how), Value: ms(pct(intr, 99)), Unit: "ms", N: int64(len(intr)), Note: note}
			switch {
			case loaded:
				x.fig(p50, fmt.Sprintf("interruption p50, %s, idle", s.Label), nil)
				x.fig(p99, fmt.Sprintf("interruption p99, %s, idle", s.Label), nil)
			case s.Bytes == 1<<10:
				x.fig(p50, "etcd CAS p50", le(2))
				x.fig(p99, "etcd CAS p99", le(2.5))
				x.fig(p50, peerName, le(0.1))
			default:
				x.fig(p50, peerName, le(0.1))
				x.fig(p99, "stop-persist-reload p99, "+s.Label, nil)
			}
		}
		// Free the memory: the state is not needed any more.
		if _, err := x.m.direct.Call(x.ctx, name, "fill", "0"); err != nil {
			return err
		}
	}
	return nil
}

func joinNote(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}

// compact compacts etcd at its current revision: the peer's state writes
// are garbage after a size is done, and bbolt reuses the pages it frees.
func (x *run) compact() error {
	resp, err := x.m.ec.Get(x.ctx, "/bench/none")
	if err != nil {
		return err
	}
	_, err = x.m.ec.Compact(x.ctx, resp.Header.Revision, clientv3.WithCompactPhysical())
	return err
}

// rate moves each object back and forth between n1 and n2, one goroutine
// per object, for the plan's window, and returns the relocations completed
// per second, how many, and how many did not complete.
func (x *run) rate(objs []*owned) (float64, int64, int64) {
	return concurrent(len(objs), x.cfg.Plan.Window, func(w int) error {
		_, _, err := x.m.move(x.ctx, objs[w])
		return err
	})
}

func (x *run) relocationRates() error {
	best := Measure{Name: "objects/s, single moves (best of 1, 8, 64 in flight)", Unit: "/s"}
	for _, k := range []int{1, 8, 64} {
		x.step("relocations/s with %d in flight (1 KiB states) for %s", k, x.cfg.Plan.Window)
		objs := make([]*owned, k)
		for i := range objs {
			o, err := x.m.create(x.ctx, fmt.Sprintf("actor/blob/rate-%d-%d", k, i), "fill", "1024")
			if err != nil {
				return err
			}
			objs[i] = o
		}
		r, n, failed := x.rate(objs)
		var t *Target
		if k == 64 {
			t = ge(0.5)
		}
		x.fig(Measure{Name: fmt.Sprintf("relocations/s, %d in flight", k), Value: r, Unit: "/s", N: n, Note: failedNote(failed)}, "etcd CAS/s, 64 clients", t)
		if r > best.Value {
			best.Value, best.N = r, n
		}
	}
	x.base(best)
	return nil
}

func (x *run) groups() error {
	const groups, members = 8, 8
	x.step("%d groups of %d members (1 KiB states) moving, %d in flight, for %s", groups, members, groups, x.cfg.Plan.Window)
	n1 := x.m.nodes["n1"]
	objs := make([]*owned, groups)
	for g := range groups {
		name := fmt.Sprintf("group/bench-%d", g)
		if _, err := n1.CreateGroup(x.ctx, name); err != nil {
			return err
		}
		for i := range members {
			a := fmt.Sprintf("actor/blob/g%d-m%d", g, i)
			if _, err := n1.JoinGroup(x.ctx, name, a, time.Minute); err != nil {
				return err
			}
			if _, err := x.m.direct.Call(x.ctx, a, "fill", "1024"); err != nil {
				return err
			}
		}
		objs[g] = &owned{name: name, at: "n1"}
	}
	r, n, failed := x.rate(objs)
	x.fig(Measure{Name: fmt.Sprintf("objects/s moved in groups of %d, %d in flight", members, groups), Value: r * members, Unit: "/s", N: n * members, Note: failedNote(failed)},
		"objects/s, single moves (best of 1, 8, 64 in flight)", ge(3))
	return nil
}

func (x *run) streaming() error {
	p := x.cfg.Plan
	x.step("streaming a %d MiB state", p.Stream>>20)
	o, err := x.m.create(x.ctx, "actor/blob/stream", "fill", fmt.Sprint(p.Stream))
	if err != nil {
		return err
	}
	var best float64
	for range 2 {
		d, bytes, err := x.m.move(x.ctx, o)
		if err != nil {
			return err
		}
		best = max(best, float64(bytes)/d.Seconds()/(1<<30))
	}
	x.fig(Measure{Name: fmt.Sprintf("streaming a %d MiB state (best of 2)", p.Stream>>20), Value: best, Unit: "GiB/s", N: int64(p.Stream)}, "loopback TCP, 1 connection", ge(0.7))
	_, err = x.m.direct.Call(x.ctx, o.name, "fill", "0")
	return err
}

func (x *run) calls() error {
	p := x.cfg.Plan
	var objs []*owned
	for i := range 16 {
		o, err := x.m.create(x.ctx, fmt.Sprintf("actor/counter/calls-%d", i), "add", "1")
		if err != nil {
			return err
		}
		objs = append(objs, o)
	}
	for _, storm := range []bool{false, true} {
		var stop func() int64
		how := ""
		if storm {
			how = ", relocation storm"
			stop = x.storm(objs)
		}
		for _, via := range []struct {
			name string
			c    *client.Client
		}{{"Go client direct", x.m.direct}, {"through gateway", x.m.gateway}} {
			x.step("calls %s%s: %d serial, then 64 in flight for %s", via.name, how, p.Ops, p.Window)
			var failed int64
			lat := make([]time.Duration, 0, p.Ops)
			for i := range p.Ops {
				t0 := time.Now()
				if _, err := via.c.Call(x.ctx, objs[i%len(objs)].name, "add", "1"); err != nil {
					failed++
					continue
				}
				lat = append(lat, time.Since(t0))
			}
			if len(lat) == 0 {
				return fmt.Errorf("bench: every call %s failed", via.name)
			}
			rate, n, rfailed := concurrent(64, p.Window, func(w int) error {
				_, err := via.c.Call(x.ctx, objs[w%len(objs)].name, "add", "1")
				return err
			})
			p50 := Measure{Name: "call p50, " + via.name + how, Value: ms(pct(lat, 50)), Unit: "ms", N: int64(len(lat)), Note: failedNote(failed)}
			p99 := Measure{Name: "call p99, " + via.name + how, Value: ms(pct(lat, 99)), Unit: "ms", N: int64(len(lat)), Note: failedNote(failed)}
			cps := Measure{Name: "calls/s, " + via.name + how + ", 64 in flight", Value: rate, Unit: "/s", N: n, Note: failedNote(rfailed)}
			switch {
			case storm:
				x.fig(p50, "call p50, "+via.name, nil)
				x.fig(p99, "call p99, "+via.name, nil)
				x.fig(cps, "calls/s, "+via.name+", 64 in flight", nil)
			case via.c == x.m.direct:
				x.fig(p50, "raw gRPC unary p50", le(1.3))
				x.fig(p99, "raw gRPC unary p99", nil)
				x.fig(cps, "raw gRPC calls/s, 64 in flight", nil)
			default:
				x.fig(p50, "raw gRPC unary p50", nil)
				x.fig(p99, "raw gRPC unary p99", nil)
				x.fig(cps, "raw gRPC calls/s, 64 in flight", nil)
			}
		}
		if stop != nil {
			moved := stop()
			x.r.Figures[len(x.r.Figures)-1].Note = joinNote(x.r.Figures[len(x.r.Figures)-1].Note, fmt.Sprintf("storm: %d relocations", moved))
		}
	}
	return nil
}

// storm keeps relocating objs, 4 at a time, until stop is called; stop
// returns how many relocations completed.
func (x *run) storm(objs []*owned) (stop func() int64) {
	ctx, cancel := context.WithCancel(x.ctx)
	var moved atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; ctx.Err() == nil; i += 4 {
				// Each worker moves its own quarter of the objects, so that
				// two workers never move the same object at once.
				if _, _, err := x.m.move(ctx, objs[i%len(objs)]); err == nil {
					moved.Add(1)
				}
			}
		})
	}
	return func() int64 { cancel(); wg.Wait(); return moved.Load() }
}
