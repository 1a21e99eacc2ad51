package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshloc/meshloc/internal/bench/baseline"
	"github.com/meshloc/meshloc/internal/bench/procstat"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
)

// The measured sections of a run: interruption, relocation rates, groups,
// streaming, calls (the etcd baselines are in bench.go).

func (x *run) interruption() error {
	for _, s := range x.cfg.Plan.Sizes {
		if err := x.interruptionOf(s); err != nil {
			return err
		}
	}
	return nil
}

func (x *run) interruptionOf(s Size) error {
	x.step("interruption of a %s state: %d relocations idle, each after a stop-persist-reload move of the same state (%d)%s; then %d under a call load",
		s.Label, s.Moves, s.Peer, map[bool]string{true: " and an etcd CAS", false: ""}[s.Bytes == 1<<10], s.Moves)
	spr, err := baseline.NewStopPersistReload(x.ctx, x.m.ec, "/bench/spr", s.Bytes)
	if err != nil {
		return err
	}
	c, err := baseline.NewCAS(x.ctx, x.m.ec, "/bench/cas")
	if err != nil {
		return err
	}
	var wc *baseline.CAS
	if s.Bytes == 1<<10 {
		w, err := baseline.StartWatchers(x.m.ecfg, "/bench/watched/", x.m.followers())
		if err != nil {
			return err
		}
		defer w.Close()
		if wc, err = baseline.NewCAS(x.ctx, x.m.ec, "/bench/watched/cas"); err != nil {
			return err
		}
	}
	name := fmt.Sprintf("actor/blob/intr-%d", s.Bytes)
	o, err := x.m.create(x.ctx, name, "fill", fmt.Sprint(s.Bytes))
	if err != nil {
		return err
	}
	var peer, casLat, watchedLat []time.Duration
	for _, loaded := range []bool{false, true} {
		var stop func() (int64, int64)
		if loaded {
			if stop, err = x.load(name); err != nil {
				return err
			}
		}
		var intr, srcIntr []time.Duration
		var failed int
		for i := range max(s.Moves, s.Peer) {
			if !loaded && i < s.Peer {
				d, err := spr.Move(x.ctx)
				if err != nil {
					return err
				}
				peer = append(peer, d)
			}
			if i >= s.Moves {
				continue
			}
			if !loaded && s.Bytes == 1<<10 {
				d, err := c.Step(x.ctx)
				if err != nil {
					return err
				}
				casLat = append(casLat, d)
				if d, err = wc.Step(x.ctx); err != nil {
					return err
				}
				watchedLat = append(watchedLat, d)
			}
			// Foreground: each move is measured, one at a time; under load
			// a background one would first wait for the node's pacing.
			st, err := x.m.move(x.ctx, o, node.RelocateOptions{Foreground: true})
			if err != nil {
				failed++
				continue
			}
			d, sd, err := x.m.interruption(x.ctx, st, o.at)
			if err != nil {
				return err
			}
			intr = append(intr, d)
			srcIntr = append(srcIntr, sd)
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
		peerName := "stop-persist-reload p50, " + s.Label
		if !loaded {
			x.base(Measure{Name: peerName, Value: ms(pct(peer, 50)), Unit: "ms", N: int64(len(peer))})
			x.base(Measure{Name: "stop-persist-reload p99, " + s.Label, Value: ms(pct(peer, 99)), Unit: "ms", N: int64(len(peer))})
			if len(casLat) > 0 {
				x.base(Measure{Name: "etcd CAS p50", Value: ms(pct(casLat, 50)), Unit: "ms", N: int64(len(casLat))})
				x.base(Measure{Name: "etcd CAS p99", Value: ms(pct(casLat, 99)), Unit: "ms", N: int64(len(casLat))})
				x.base(Measure{Name: watchedCAS, Value: ms(pct(watchedLat, 50)), Unit: "ms", N: int64(len(watchedLat)),
					Note: fmt.Sprintf("the key followed by %d watch streams, as records are by the location caches", x.m.followers())})
			}
		}
		how := "idle"
		if loaded {
			how = "under load"
		}
		p50 := Measure{Name: fmt.Sprintf("interruption p50, %s, %s", s.Label, how), Value: ms(pct(intr, 50)), Unit: "ms", N: int64(len(intr)), Note: note}
		p99 := Measure{Name: fmt.Sprintf("interruption p99, %s, %s", s.Label, how), Value: ms(pct(intr, 99)), Unit: "ms", N: int64(len(intr)), Note: note}
		src := Measure{Name: fmt.Sprintf("seal to OUTCOME at the source p50, %s, %s", s.Label, how), Value: ms(pct(srcIntr, 50)), Unit: "ms", N: int64(len(srcIntr))}
		switch {
		case loaded:
			x.fig(p50, fmt.Sprintf("interruption p50, %s, idle", s.Label), nil)
			x.fig(p99, fmt.Sprintf("interruption p99, %s, idle", s.Label), nil)
		case s.Bytes == 1<<10:
			// The limit of a relocation is one CAS plus the bytes moved
			// once; stop-persist-reload commits three transactions.
			x.fig(p50, "etcd CAS p50", le(1.3))
			x.fig(p99, "etcd CAS p99", le(2))
			// What the commit pays beyond the CAS: etcd's events to
			// every follower of the record.
			x.fig(p50, watchedCAS, nil)
			x.fig(p50, peerName, le(peerTarget(s.Bytes)))
		default:
			x.fig(p50, peerName, le(peerTarget(s.Bytes)))
			x.fig(p99, "stop-persist-reload p99, "+s.Label, nil)
			if s.Bytes >= 64<<20 {
				// Pre-copy keeps the bulk out of the interruption.
				x.fig(p50, "interruption p50, 1 KiB, idle", le(10))
			}
		}
		x.fig(src, p50.Name, nil)
	}
	spr.Close(x.ctx)
	if err := x.compact(); err != nil {
		return err
	}
	// Free the memory: the state is not needed any more.
	if _, err := x.m.direct.Call(x.ctx, name, "fill", "0"); err != nil {
		return err
	}
	return nil
}

// The CAS baselines on keys as many watch streams follow as follow a
// record.
const (
	watchedCAS     = "etcd CAS p50, watched"
	watchedCASRate = "etcd CAS/s, 64 clients, watched"
)

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

// mover returns a rate window that moves each object back and forth
// between n1 and n2, one goroutine per object.
func (x *run) mover(objs []*owned) func(time.Duration) (int64, int64, time.Duration, error) {
	return func(d time.Duration) (int64, int64, time.Duration, error) {
		return concurrent(len(objs), d, func(w int) error {
			_, err := x.m.move(x.ctx, objs[w])
			return err
		})
	}
}

// casWindow is a rate window of the CAS baseline with 64 clients, each on
// its own key under prefix.
func (x *run) casWindow(prefix string) func(time.Duration) (int64, int64, time.Duration, error) {
	return func(d time.Duration) (int64, int64, time.Duration, error) {
		ok, el, err := baseline.CASRate(x.ctx, x.m.ec, prefix, 64, d)
		return ok, 0, el, err
	}
}

func (x *run) relocationRates() error {
	w := x.cfg.Plan.Window
	best := Measure{Name: "objects/s, single moves (best of 1, 8, 64 in flight)", Unit: "/s"}
	var figs []Measure
	// 64 first: its windows alternate with the CAS baseline's.
	for _, k := range []int{64, 1, 8} {
		objs := make([]*owned, k)
		for i := range objs {
			o, err := x.m.create(x.ctx, fmt.Sprintf("actor/blob/rate-%d-%d", k, i), "fill", "1024")
			if err != nil {
				return err
			}
			objs[i] = o
		}
		var rate float64
		var n, failed int64
		if k == 64 {
			x.step("relocations/s with 64 in flight (1 KiB states), alternating with etcd CAS/s with 64 clients, on keys no one watches and on keys %d watch streams follow: 2 windows of %s each", x.m.followers(), w/2)
			wr, err := baseline.StartWatchers(x.m.ecfg, "/bench/watched-rate/", x.m.followers())
			if err != nil {
				return err
			}
			var casCPU, moveCPU procstat.CPUMeter
			rates, oks, fails, err := alternate(2, w, casCPU.Wrap(x.casWindow("/bench/rate")), x.casWindow("/bench/watched-rate"), moveCPU.Wrap(x.mover(objs)))
			wr.Close()
			if err != nil {
				return err
			}
			x.base(Measure{Name: "etcd CAS/s, 64 clients", Value: rates[0], Unit: "/s", N: oks[0]})
			x.base(Measure{Name: watchedCASRate, Value: rates[1], Unit: "/s", N: oks[1],
				Note: fmt.Sprintf("the keys followed by %d watch streams, as records are by the location caches", x.m.followers())})
			rate, n, failed = rates[2], oks[2], fails[2]
			// On a machine whose cores the run saturates, a rate is the
			// CPU each operation costs: the process's CPU per CAS beside
			// its CPU per relocation.
			if c, ok := casCPU.Per(oks[0]); ok {
				x.base(Measure{Name: "CPU per etcd CAS, 64 clients", Value: ms(c), Unit: "ms", N: oks[0], Note: casCPU.Note()})
				if r, ok := moveCPU.Per(oks[2]); ok {
					x.fig(Measure{Name: "CPU per relocation, 64 in flight", Value: ms(r), Unit: "ms", N: oks[1], Note: moveCPU.Note()}, "CPU per etcd CAS, 64 clients", nil)
				}
			}
		} else {
			x.step("relocations/s with %d in flight (1 KiB states) for %s", k, w)
			rates, oks, fails, err := alternate(1, w, x.mover(objs))
			if err != nil {
				return err
			}
			rate, n, failed = rates[0], oks[0], fails[0]
		}
		figs = append(figs, Measure{Name: fmt.Sprintf("relocations/s, %d in flight", k), Value: rate, Unit: "/s", N: n, Note: failedNote(failed)})
		if rate > best.Value {
			best.Value, best.N = rate, n
		}
	}
	for _, f := range []Measure{figs[1], figs[2], figs[0]} {
		var t *Target
		if strings.HasSuffix(f.Name, " 64 in flight") {
			t = ge(0.5)
		}
		x.fig(f, "etcd CAS/s, 64 clients", t)
		if t != nil {
			// Every relocation writes a record twice (intent, commit) that
			// every location cache follows; the plain CAS, a key no one does.
			x.fig(f, watchedCASRate, nil)
		}
	}
	x.base(best)
	return nil
}

func (x *run) groups() error {
	const members = 8
	inFlight := x.cfg.Plan.Groups
	if len(inFlight) == 0 {
		inFlight = []int{8, 64}
	}
	n1 := x.m.nodes["n1"]
	var objs []*owned
	best := Measure{Name: fmt.Sprintf("objects/s moved in groups of %d (best of %s in flight)", members, joinInts(inFlight)), Unit: "/s"}
	var at8 Measure
	for _, k := range inFlight {
		for g := len(objs); g < k; g++ {
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
			objs = append(objs, &owned{name: name, at: "n1"})
		}
		x.step("%d groups of %d members (1 KiB states) moving, %d in flight, for %s", k, members, k, x.cfg.Plan.Window)
		rates, oks, fails, err := alternate(1, x.cfg.Plan.Window, x.mover(objs[:k]))
		if err != nil {
			return err
		}
		m := Measure{Name: fmt.Sprintf("objects/s moved in groups of %d, %d in flight", members, k), Value: rates[0] * members, Unit: "/s", N: oks[0] * members, Note: failedNote(fails[0])}
		if k == 8 {
			at8 = m
		}
		if m.Value > best.Value {
			best.Value, best.N, best.Note = m.Value, m.N, m.Note
		}
	}
	// The target compares the best rate of group moves with the best rate
	// of single moves; beside it, groups against single moves at the same
	// number of relocations in flight (8).
	x.fig(best, "objects/s, single moves (best of 1, 8, 64 in flight)", ge(3))
	if at8.Value > 0 {
		x.fig(at8, "relocations/s, 8 in flight", nil)
	}
	return nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}

// tcpBaselines are the loopback TCP transfers the streaming figure is shown
// against: the transfer alone (the target's), then the same bytes landing in
// memory already touched and in memory the process must fault in, as a
// target's do (on a VM a first touch can cost more than the transfer).
var tcpBaselines = []struct {
	name   string
	into   baseline.Sink
	target *Target
}{
	{"loopback TCP, 1 connection (best of 2)", baseline.Discard, ge(0.7)},
	{"loopback TCP into touched memory, 1 connection (best of 2)", baseline.Touched, nil},
	{"loopback TCP into fresh memory, 1 connection (best of 2)", baseline.Fresh, nil},
}

func (x *run) streaming() error {
	p := x.cfg.Plan
	x.step("streaming a %d MiB state, after the same bytes over one loopback TCP connection (read and discarded, into touched memory, into fresh memory): best of 2", p.Stream>>20)
	o, err := x.m.create(x.ctx, "actor/blob/stream", "fill", fmt.Sprint(p.Stream))
	if err != nil {
		return err
	}
	var best float64
	tcp := make([]float64, len(tcpBaselines))
	for range 2 {
		for i, b := range tcpBaselines {
			t, err := baseline.TCPThroughput(p.Stream, b.into)
			if err != nil {
				return err
			}
			tcp[i] = max(tcp[i], t)
		}
		// Without pre-copy: the figure is the transfer of the whole
		// state, which a pre-copy moves out of the interruption.
		st, err := x.m.move(x.ctx, o, node.RelocateOptions{NoPrecopy: true})
		if err != nil {
			return err
		}
		d, _, err := x.m.interruption(x.ctx, st, o.at)
		if err != nil {
			return err
		}
		best = max(best, float64(st.GetPayloadBytes())/d.Seconds()/(1<<30))
	}
	streamed := Measure{Name: fmt.Sprintf("streaming a %d MiB state (best of 2)", p.Stream>>20), Value: best, Unit: "GiB/s", N: int64(p.Stream)}
	for i, b := range tcpBaselines {
		x.base(Measure{Name: b.name, Value: tcp[i], Unit: "GiB/s", N: int64(p.Stream)})
		x.fig(streamed, b.name, b.target)
	}
	_, err = x.m.direct.Call(x.ctx, o.name, "fill", "0")
	return err
}

func (x *run) calls() error {
	p := x.cfg.Plan
	raw, err := baseline.StartRawGRPC()
	if err != nil {
		return err
	}
	defer raw.Close()
	var objs []*owned
	for i := range 16 {
		o, err := x.m.create(x.ctx, fmt.Sprintf("actor/counter/calls-%d", i), "add", "1")
		if err != nil {
			return err
		}
		objs = append(objs, o)
	}
	// Objects the storm never moves: calls to them must not wait behind
	// the relocations of the others.
	var still []*owned
	for i := range 8 {
		o, err := x.m.create(x.ctx, fmt.Sprintf("actor/counter/still-%d", i), "add", "1")
		if err != nil {
			return err
		}
		still = append(still, o)
	}
	type path struct {
		name string
		call func(ctx context.Context, i int) error
	}
	via := func(c *client.Client, objs []*owned) func(context.Context, int) error {
		return func(ctx context.Context, i int) error {
			_, err := c.Call(ctx, objs[i%len(objs)].name, "add", "1")
			return err
		}
	}
	rawPath := path{"raw gRPC", func(ctx context.Context, _ int) error { return raw.Call(ctx) }}
	paths := []path{{"Go client direct", via(x.m.direct, objs)}, {"through gateway", via(x.m.gateway, objs)}}
	const stillPath = "Go client direct, not moving"
	// Idle, then the storm as every relocation asked of a node is by
	// default (background: paced while the node's calls are slow; the
	// targets), then the same storm in the foreground (as a drain's: never
	// paced; beside it, no target).
	for _, mode := range []string{"", "background", "foreground"} {
		storm, foreground := mode != "", mode == "foreground"
		how := ""
		run := paths
		switch {
		case foreground:
			how = ", foreground relocation storm"
		case storm:
			how = ", relocation storm"
		}
		if storm {
			run = append(slices.Clone(run), path{stillPath, via(x.m.direct, still)})
		} else {
			run = append([]path{rawPath}, paths...) // the baseline, interleaved
		}
		var stop func() int64
		if storm {
			stop = x.storm(objs, foreground)
		}
		x.step("calls%s: %d serial calls to one object on each of %d paths in turn, then 64 in flight over 16 objects on each for %s (2 alternating windows)", how, p.Ops, len(run), p.Window)
		lat := make([][]time.Duration, len(run))
		failed := make([]int64, len(run))
		// Blocks of 50 calls to one object on each path in turn (raw,
		// direct, raw, gateway, …; the raw samples all go to the
		// baseline): each path runs warm, as in a loop of calls, and a
		// burst of load from elsewhere falls on all of them. One object,
		// like the raw baseline's one server: the latency of the call
		// path, not of switching connections.
		var order []int
		for j := range run {
			if !storm && j > 0 {
				order = append(order, 0)
			}
			if storm || j > 0 {
				order = append(order, j)
			}
		}
		const block = 50
		s0 := procstat.ReadSched()
		for range max(1, p.Ops/block) {
			for _, j := range order {
				for range block {
					t0 := time.Now()
					if err := run[j].call(x.ctx, 0); err != nil {
						failed[j]++
						continue
					}
					lat[j] = append(lat[j], time.Since(t0))
				}
			}
		}
		windows := make([]func(time.Duration) (int64, int64, time.Duration, error), len(run))
		for j, pt := range run {
			windows[j] = func(d time.Duration) (int64, int64, time.Duration, error) {
				return concurrent(64, d, func(w int) error { return pt.call(x.ctx, w) })
			}
		}
		rates, oks, fails, err := alternate(2, p.Window, windows...)
		if err != nil {
			return err
		}
		waits := procstat.ReadSched().Since(s0, how)
		moved := int64(-1)
		if stop != nil {
			moved = stop()
		}
		for j, pt := range run {
			if len(lat[j]) == 0 {
				return fmt.Errorf("bench: every call %s%s failed", pt.name, how)
			}
			n := int64(len(lat[j]))
			p50 := Measure{Name: "call p50, " + pt.name + how, Value: ms(pct(lat[j], 50)), Unit: "ms", N: n, Note: failedNote(failed[j])}
			p99 := Measure{Name: "call p99, " + pt.name + how, Value: ms(pct(lat[j], 99)), Unit: "ms", N: n, Note: failedNote(failed[j])}
			cps := Measure{Name: "calls/s, " + pt.name + how + ", 64 in flight", Value: rates[j], Unit: "/s", N: oks[j], Note: failedNote(fails[j])}
			if moved >= 0 {
				cps.Note = joinNote(cps.Note, fmt.Sprintf("storm: %d relocations, %s", moved, mode))
			}
			switch {
			case pt.name == rawPath.name:
				for _, w := range waits {
					x.base(w)
				}
				x.base(Measure{Name: "raw gRPC unary p50", Value: p50.Value, Unit: "ms", N: n})
				x.base(Measure{Name: "raw gRPC unary p99", Value: p99.Value, Unit: "ms", N: n})
				x.base(Measure{Name: "raw gRPC calls/s, 64 in flight", Value: cps.Value, Unit: "/s", N: cps.N, Note: cps.Note})
			case foreground && pt.name == stillPath:
				x.fig(p99, "call p99, Go client direct", nil)
				x.fig(cps, "calls/s, Go client direct, 64 in flight", nil)
			case foreground:
				x.fig(p99, "call p99, "+pt.name, nil)
				x.fig(cps, "calls/s, "+pt.name+", 64 in flight", nil)
			case storm && pt.name == stillPath:
				// Where a call waits during the storm: the run queue (the
				// relocations' work holds the processors) and GC pauses,
				// beside the same when nothing moves.
				for _, w := range waits {
					if b := x.lookup(strings.TrimSuffix(w.Name, how)); b.Unit != "" {
						x.fig(w, b.Name, nil)
					}
				}
				// The objects that are not moving, beside the same calls
				// when nothing moves.
				x.fig(p50, "call p50, Go client direct", nil)
				x.fig(p99, "call p99, Go client direct", le(2))
				x.fig(cps, "calls/s, Go client direct, 64 in flight", nil)
			case storm:
				x.fig(p50, "call p50, "+pt.name, nil)
				x.fig(p99, "call p99, "+pt.name, nil)
				x.fig(cps, "calls/s, "+pt.name+", 64 in flight", ge(0.8))
			default:
				lat, rate := le(1.3), (*Target)(nil)
				if pt.name == "through gateway" {
					lat, rate = le(2.3), ge(0.6)
				}
				x.fig(p50, "raw gRPC unary p50", lat)
				x.fig(p99, "raw gRPC unary p99", nil)
				x.fig(cps, "raw gRPC calls/s, 64 in flight", rate)
			}
		}
	}
	return nil
}

// peerTarget is the interruption's target as a fraction of
// stop-persist-reload's for a state of n bytes.
func peerTarget(n int) float64 {
	switch {
	case n <= 1<<10:
		return 0.4
	case n <= 1<<20:
		return 0.2
	}
	return 0.05
}

// storm keeps relocating objs, 4 at a time, until stop is called, as
// background or foreground relocations; stop returns how many completed.
func (x *run) storm(objs []*owned, foreground bool) (stop func() int64) {
	ctx, cancel := context.WithCancel(x.ctx)
	var moved atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; ctx.Err() == nil; i += 4 {
				// Each worker moves its own quarter of the objects, so that
				// two workers never move the same object at once.
				if _, err := x.m.move(ctx, objs[i%len(objs)], node.RelocateOptions{Foreground: foreground}); err == nil {
					moved.Add(1)
				}
			}
		})
	}
	return func() int64 { cancel(); wg.Wait(); return moved.Load() }
}
