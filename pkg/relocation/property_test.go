package relocation

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// TestPropertyRandomInterleavings drives one Source and one Target (the
// bench of sim_test.go) through random interleavings of frame delivery,
// drop, duplication and reordering of chunks; ticks across the deadline and
// the fallback wait; crashes of either side; lease expiry of either side;
// uncertain commits, preserves and intents; failed captures, restores and
// reads; draining; a broken stream. After every step it asserts the
// invariants of docs/design.md §9 as they apply to the machines (sim.check,
// sim.afterStep, sim.handle):
//
//	(a) the store names exactly one owner; the target admits only after its
//	    commit succeeded;
//	(b) the source never reopens after the target's commit succeeded, and
//	    never serves while the target holds the committed record;
//	(c) generations and store versions never decrease;
//	(d) every run ends — both machines done, or the side crashed — within
//	    deadline + fallback + a few ticks once faults stop, and each Finish
//	    agrees with the store (completed ⇔ the target owns it, aborted ⇔ the
//	    source owns it, failed ⇔ the source cannot serve it);
//	(e) Step never returns ErrInvalidTransition, and ErrProtocol only for a
//	    gap the network made (a lost DATA frame).
//
// MESHLOC_PROPERTY_RUNS sets the number of runs (300 by default);
// MESHLOC_PROPERTY_SEED the first seed (random by default, always logged).
// A failure prints the seed and the full transcript of the failing run.
func TestPropertyRandomInterleavings(t *testing.T) {
	runs := 300
	if v := os.Getenv("MESHLOC_PROPERTY_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("MESHLOC_PROPERTY_RUNS=%q: %v", v, err)
		}
		runs = n
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("MESHLOC_PROPERTY_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("MESHLOC_PROPERTY_SEED=%q: %v", v, err)
		}
		seed = n
	}
	t.Logf("seeds %d..%d (MESHLOC_PROPERTY_SEED=%d MESHLOC_PROPERTY_RUNS=%d to repeat)", seed, seed+uint64(runs)-1, seed, runs)
	var stats propStats
	for i := range runs {
		run := seed + uint64(i)
		if bad := propertyRun(run, nil, &stats); bad != "" {
			var out strings.Builder
			propertyRun(run, &out, nil)
			t.Fatalf("seed %d (repeat with MESHLOC_PROPERTY_SEED=%d MESHLOC_PROPERTY_RUNS=1): %s\n\n%s", run, run, bad, out.String())
		}
	}
	t.Logf("outcomes: %s", stats)
}

// propStats counts how runs ended, to show the test reaches every outcome.
type propStats struct {
	source, target map[string]int
}

func (p propStats) String() string {
	return fmt.Sprintf("source %v, target %v", p.source, p.target)
}

func (p *propStats) add(s *sim) {
	if p.source == nil {
		p.source, p.target = map[string]int{}, map[string]int{}
	}
	name := func(dead bool, o Outcome, unstarted bool) string {
		switch {
		case dead:
			return "crashed"
		case unstarted:
			return "no-prepare"
		}
		return o.String()
	}
	p.source[name(s.dead[onSource], s.src.Outcome(), false)]++
	p.target[name(s.dead[onTarget], s.tgt.Outcome(), s.tgt.Phase() == TargetNew)]++
}

// propertyRun plays one random run; it returns what went wrong ("" if
// nothing). out, when set, receives the run as a transcript.
func propertyRun(seed uint64, out *strings.Builder, stats *propStats) string {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	cfg := simConfig{DeadlineMs: 1000, ChunkSize: 1 + r.IntN(8), FallbackMs: int64(50 + r.IntN(600))}
	// A quarter of the runs move a group (sim_group_test.go), a quarter are
	// an Actor Join; the bench checks at every step that no member is split
	// from its group and that a membership is written on both sides or none.
	switch r.IntN(4) {
	case 0:
		cfg.Members = 1 + r.IntN(3)
	case 1:
		cfg.Join = true
	}
	// A third move their state with an eager cutover (one chunk: DATA and
	// CUTOVER sent without waiting for READY).
	if r.IntN(3) == 0 {
		cfg.EagerMaxBytes, cfg.ChunkSize = 1<<10, 1<<10
	} else if r.IntN(3) == 0 {
		// A pre-copy: a base of another size than the sealed state, some
		// of whose chunks change.
		cfg.PrecopyMinBytes = 1 + r.IntN(8)
	}
	// A third of the rest are bulk units under the one-write rule (their
	// intent in the bulk's key, which may be deleted: the whole-bulk abort).
	if cfg.Members == 0 && !cfg.Join && cfg.PrecopyMinBytes == 0 && r.IntN(3) == 0 {
		cfg.Bulk = true
	}
	s := newSim(cfg, out)
	// Each class of fault is on in about a third of the runs, so that clean
	// runs, lossy ones and crashing ones all occur.
	var f faults
	f.loss, f.uncertain, f.crashSource, f.crashTarget = r.IntN(3) == 0, r.IntN(3) == 0, r.IntN(4) == 0, r.IntN(4) == 0
	f.leaseLoss, f.drain, f.breakStream, f.failIO = r.IntN(5) == 0, r.IntN(5) == 0, r.IntN(6) == 0, r.IntN(6) == 0
	f.onward = r.IntN(6) == 0 && cfg.Members == 0 && !cfg.Join // a foreign write of the primary alone would split a group
	f.abortBulk = cfg.Bulk && r.IntN(3) == 0
	s.segments = r.IntN(4)
	s.printf("# seed %d: deadline=%d chunk=%d fallback=%d members=%d join=%v precopy=%d bulk=%v faults=%+v\n", seed, cfg.DeadlineMs, cfg.ChunkSize, cfg.FallbackMs, cfg.Members, cfg.Join, cfg.PrecopyMinBytes, cfg.Bulk, f)
	s.start()

	const maxRandomSteps = 400
	for i := 0; i < maxRandomSteps && !s.finished(); i++ {
		propertyStep(s, r, f)
		if len(s.violations) > 0 {
			return s.violations[0]
		}
	}

	// Faults stop: everything is delivered, every result is a plain success,
	// every change is observed, and time advances by 10 ms
	// only when nothing else can happen. Everything must then end by the
	// deadline plus the fallback wait, plus a few ticks.
	s.printf("# faults stop at now=%d\n", s.now)
	bound := max(s.now, cfg.DeadlineMs+cfg.FallbackMs) + 50
	for !s.finished() {
		if s.now > bound {
			return fmt.Sprintf("not ended at now=%d (bound %d): source %s, target %s", s.now, bound, s.sideState(onSource), s.sideState(onTarget))
		}
		switch {
		case len(s.inflight[onTarget]) > 0:
			f := s.inflight[onTarget][0]
			s.inflight[onTarget] = s.inflight[onTarget][1:]
			s.printf("target ← %s\n", describeFrame(f))
			s.deliver(onTarget, f)
		case len(s.inflight[onSource]) > 0:
			f := s.inflight[onSource][0]
			s.inflight[onSource] = s.inflight[onSource][1:]
			s.printf("source ← %s\n", describeFrame(f))
			s.deliver(onSource, f)
		case s.pending[onSource] != nil:
			s.printf("source ← %s result\n", actionName(s.pending[onSource]))
			s.complete(onSource, resOK, 1)
		case s.pending[onTarget] != nil:
			s.printf("target ← %s result\n", actionName(s.pending[onTarget]))
			s.complete(onTarget, resOK, 1)
		case s.readable():
			s.printf("source ← settle read: %s\n", s.store)
			s.settleRead(nil)
		case s.changed && !s.dead[onSource]:
			s.printf("source ← observed: %s\n", s.store)
			s.observe()
		default:
			s.printf("tick now=%d\n", s.now+10)
			s.tick(s.now + 10)
		}
		if len(s.violations) > 0 {
			return s.violations[0]
		}
	}
	s.checkEnd()
	if len(s.violations) > 0 {
		return s.violations[0]
	}
	if !s.dead[onSource] && s.src.Outcome() == 0 {
		return "the source ended without an outcome"
	}
	if !s.dead[onTarget] && s.tgt.Phase() != TargetNew && s.tgt.Outcome() == 0 {
		return "the target ended without an outcome"
	}
	if stats != nil {
		stats.add(s)
	}
	return ""
}

// faults are the classes of fault a run may inject.
type faults struct {
	loss, uncertain, crashSource, crashTarget, leaseLoss, drain, breakStream, failIO bool
	// onward: once committed, the object moves on to another owner, or the
	// target restarts under a new owner generation, before the source reads.
	onward bool
	// abortBulk: a bulk unit's key is deleted at some point (the whole-bulk
	// abort of its source).
	abortBulk bool
}

// propertyStep makes one random move among those the state and the run's
// faults allow.
func propertyStep(s *sim, r *rand.Rand, f faults) {
	type move struct {
		weight int
		do     func()
	}
	var moves []move
	add := func(w int, ok bool, f func()) {
		if ok && w > 0 {
			moves = append(moves, move{w, f})
		}
	}
	pct := func(p int) bool { return r.IntN(100) < p }

	for _, to := range []side{onTarget, onSource} {
		add(30, len(s.inflight[to]) > 0, func() { s.randomDeliver(to, r, f.loss) })
	}
	add(20, s.pending[onSource] != nil, func() {
		k, n := resOK, 1+r.IntN(24)
		switch s.pending[onSource].(type) {
		case WriteIntent, Preserve, AwaitBulkIntent:
			if f.uncertain {
				k = pick(r, []outcomeKind{resOK, resOK, resOK, resUncertain, resUncertainWrote})
			}
		case Seal:
			if f.failIO && pct(10) {
				k = resFail
			}
			if pct(10) {
				n = 0 // an empty envelope: one empty chunk
			}
			for c := 0; c*s.cfg.ChunkSize < n; c++ {
				if pct(30) {
					s.changeChunks = append(s.changeChunks, c)
				}
			}
		case Snapshot:
			if f.failIO && pct(10) {
				k = resFail
			}
		case SendBoundary:
			n = r.IntN(4)
		}
		s.printf("source ← %s result (%s, n=%d)\n", actionName(s.pending[onSource]), kindName(k), n)
		s.complete(onSource, k, n)
	})
	add(20, s.pending[onTarget] != nil, func() {
		k := resOK
		switch s.pending[onTarget].(type) {
		case Restore:
			if f.failIO && pct(10) {
				k = resFail
			}
		case Commit:
			if f.uncertain {
				k = pick(r, []outcomeKind{resOK, resOK, resOK, resUncertain, resUncertainWrote})
			}
		case ResolveCommit:
			if f.uncertain && pct(30) {
				k = resFail
			}
		}
		s.printf("target ← %s result (%s)\n", actionName(s.pending[onTarget]), kindName(k))
		s.complete(onTarget, k, 0)
	})
	// The source's settle reads complete when they complete; the location
	// cache shows a change of the record some time after it happened.
	add(15, s.readable(), func() {
		if f.failIO && pct(20) {
			s.printf("source ← settle read: error\n")
			s.settleRead(errUncertain)
			return
		}
		s.printf("source ← settle read: %s\n", s.store)
		s.settleRead(nil)
	})
	add(10, s.changed && !s.dead[onSource], func() {
		s.printf("source ← observed: %s\n", s.store)
		s.observe()
	})
	add(15, true, func() {
		now := s.now + int64(r.IntN(150))
		s.printf("tick now=%d\n", now)
		s.tick(now)
	})
	for _, on := range []side{onSource, onTarget} {
		add(2, !s.dead[on] && map[side]bool{onSource: f.crashSource, onTarget: f.crashTarget}[on], func() {
			s.printf("crash %s\n", on)
			s.crash(on)
		})
		id := s.ownerOf(on).ID
		alive := s.store.alive(s.ownerOf(on))
		// A crashed node's lease ends after its TTL; a live node may lose
		// its lease too (a partition from etcd): it does not know.
		add(map[bool]int{true: 6, false: 1}[s.dead[on]], alive && (s.dead[on] || f.leaseLoss), func() {
			s.printf("expire owner=%s\n", id)
			s.expire(id)
		})
	}
	add(3, f.onward && s.store.commitTo != nil && !s.store.foreign, func() {
		if r.IntN(2) == 0 {
			s.printf("move owner=u1\n")
			s.moveOn("u1")
			return
		}
		s.printf("restart owner=%s\n", s.tgtID.ID)
		s.crash(onTarget)
		s.store.expire(s.tgtID.ID)
		s.store.addOwner(s.tgtID.ID)
	})
	add(4, len(s.late) > 0, func() {
		i := r.IntN(len(s.late))
		land := s.late[i]
		s.late = append(s.late[:i], s.late[i+1:]...)
		s.printf("a write whose RPC failed lands now\n")
		land()
	})
	add(2, f.abortBulk && s.store.bulks[simBulkID].rev != 0, func() {
		s.printf("abort-bulk\n")
		s.store.deleteBulk(simBulkID)
	})
	add(2, !s.draining && f.drain, func() {
		s.printf("drain target\n")
		s.draining = true
		s.step(onTarget, Tick{NowMs: s.now, Draining: true})
	})
	add(1, !s.broken && f.breakStream, func() {
		s.printf("break-stream\n")
		s.inflight = [2][]*pb.RelocationFrame{}
		s.broken = true
		s.step(onSource, StreamBroken{Err: errors.New("stream reset")})
		s.step(onTarget, StreamBroken{Err: errors.New("stream reset")})
	})

	total := 0
	for _, m := range moves {
		total += m.weight
	}
	x := r.IntN(total)
	for _, m := range moves {
		if x -= m.weight; x < 0 {
			m.do()
			return
		}
	}
}

// randomDeliver delivers the next frame to a side, perhaps dropping or
// duplicating it, or first swapping two chunks (they may arrive in any
// order; every other frame keeps the stream's order).
func (s *sim) randomDeliver(to side, r *rand.Rand, loss bool) {
	q := s.inflight[to]
	if len(q) > 1 && q[0].GetChunk() != nil && q[1].GetChunk() != nil && r.IntN(100) < 20 {
		q[0], q[1] = q[1], q[0]
		s.printf("(reordered) ")
	}
	f := q[0]
	s.inflight[to] = q[1:]
	x := r.IntN(100)
	if !loss {
		x = 99
	}
	switch {
	case x < 8:
		s.printf("%s ✗ %s (dropped)\n", to, describeFrame(f))
		if f.GetData() != nil {
			s.allowProtoE = true // a gap: the next DATA is refused, and that is right
		}
	case x < 16:
		s.printf("%s ← %s (twice)\n", to, describeFrame(f))
		s.deliver(to, f)
		s.deliver(to, f)
	default:
		s.printf("%s ← %s\n", to, describeFrame(f))
		s.deliver(to, f)
	}
}

// moveOn: a later commit moved the object to owner id (same object
// generation, owner generation + 1).
func (s *sim) moveOn(id string) {
	o := s.store.owner(id)
	if o.Generation == 0 {
		o = s.store.addOwner(id)
	}
	rec := s.store.rec.Record
	rec.Owner, rec.Node = o, simNode(id)
	rec.AuthorityGeneration++
	s.store.put(rec)
	s.store.foreign = true
	s.storeChanged()
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

func kindName(k outcomeKind) string {
	return [...]string{"ok", "uncertain", "uncertain, landed", "fails"}[k]
}
