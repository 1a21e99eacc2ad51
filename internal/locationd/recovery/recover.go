package recovery

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/placement"
)

// outcome of one look at an orphan (the metric's, or one of these).
type outcome string

const (
	deferred  outcome = "deferred" // nothing attempted: left for later, or to its group
	notLeader outcome = "not_leader"
)

// Steps: the recoverer takes the orphans in steps of at most stepMax, so
// that a step's records are read, and their recoveries written, in shared
// etcd requests (RecoverMany); stepsInFlight steps overlap, each on a lane
// of its own (a batched Store: a batcher sends one request at a time, and
// etcd puts requests that arrive together into one raft entry's fsync). A
// step is sized to a tenth of a second at the rate, so a low rate stays
// smooth (Rate 10: one orphan every 100 ms).
const (
	stepMax       = 1024
	stepsInFlight = 2
	readsInFlight = 4
)

// step is how many orphans one step takes at rate r per second.
func step(r float64) int { return max(1, min(stepMax, int(r/10))) }

// recoverLoop goes over the orphans (in name order) whenever the view
// changes, and every Retry while some remain, in steps of orphans recovered
// together, at most Rate orphans per second, until ctx ends. A guarded
// write that finds the election key gone ends the term.
func (c *Controller) recoverLoop(ctx context.Context, cancel context.CancelCauseFunc, v *view, guard *authority.Guard, kick chan struct{}) {
	perOrphan := time.Duration(float64(time.Second) / c.cfg.Rate)
	size := step(c.cfg.Rate)
	retry := time.NewTicker(c.cfg.Retry)
	defer retry.Stop()
	var next time.Time
	w := &warnings{last: map[string]string{}}
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-retry.C:
		}
		names := v.orphans()
		w.forgetBeyond(len(names))
		pl := newPlacer(v)
		pctx, endPass := tracePass(ctx, len(names))
		var wg sync.WaitGroup
		var lost atomic.Bool // a write found the election key gone: stop the pass
		for i := 0; i < len(names) && ctx.Err() == nil && !lost.Load(); {
			batch := make([]string, 0, size)
			for ; i < len(names) && len(batch) < size; i++ {
				if v.orphaned(names[i]) { // not recovered meanwhile (by a call, or just now)
					batch = append(batch, names[i])
				}
			}
			if len(batch) == 0 {
				break
			}
			if !sleepUntil(ctx, next) {
				break
			}
			if now := time.Now(); next.Before(now) {
				next = now
			}
			next = next.Add(time.Duration(len(batch)) * perOrphan)
			var lane *authority.Store
			select {
			case lane = <-c.lanes:
			case <-ctx.Done():
			}
			if lane == nil {
				break
			}
			wg.Go(func() {
				defer func() { c.lanes <- lane }()
				outs := c.recoverStep(pctx, lane, v, pl, batch, guard, w)
				if c.count(outs) {
					lost.Store(true)
				}
			})
		}
		wg.Wait()
		endPass()
		if lost.Load() {
			cancel(ErrNotLeader)
			return
		}
	}
}

// sleepUntil waits until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	wait := time.Until(t)
	if wait <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(wait)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// count adds a step's outcomes to the metrics and the status; true when a
// write found that this controller does not lead any more.
func (c *Controller) count(outs map[outcome]int) bool {
	for out, n := range outs {
		if out != deferred && out != notLeader {
			c.m.recoveries.WithLabelValues(string(out)).Add(float64(n))
		}
	}
	var requests int64
	for _, st := range c.stores {
		requests += st.BatchStats().Requests
	}
	c.mu.Lock()
	c.status.Recovered += int64(outs[OutcomeRecovered])
	c.status.Failed += int64(outs[OutcomeFailed])
	if d := requests - c.status.Requests; d > 0 {
		c.m.requests.Add(float64(d))
		c.status.Requests = requests
	}
	c.mu.Unlock()
	return outs[notLeader] > 0
}

// warnings remembers the last warning per orphan, so a repeated one is not
// logged again.
type warnings struct {
	mu   sync.Mutex
	last map[string]string
}

func (w *warnings) forgetBeyond(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.last) > n {
		clear(w.last) // forget objects no longer orphaned
	}
}

// fresh reports whether why is news for name (and remembers it); a nil why
// forgets name.
func (w *warnings) fresh(name string, why error) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if why == nil {
		delete(w.last, name)
		return false
	}
	if w.last[name] == why.Error() {
		return false
	}
	w.last[name] = why.Error()
	return true
}

// placer is placement's view of the live owners for one pass over the
// orphans: their loads as the view counted them when the pass began, plus
// what the pass placed on them since, so a step's orphans spread as if
// placed one by one.
type placer struct {
	owners []lease.Owner
	cands  []placement.Candidate
	mu     sync.Mutex
	load   map[string]int
}

func newPlacer(v *view) *placer {
	owners, cands, counts := v.candidates()
	return &placer{owners: owners, cands: cands, load: counts}
}

// eligible reports whether any live owner may receive an object with need.
func (p *placer) eligible(need placement.Need) bool {
	return slices.ContainsFunc(p.cands, func(c placement.Candidate) bool { return placement.Eligible(c, need) })
}

// choose places name (see placement.Choose) and counts it on its owner.
func (p *placer) choose(name string, need placement.Need) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := placement.Choose(name, need, p.cands, func(c placement.Candidate) int { return p.load[c.ID] })
	if ok {
		p.load[p.cands[i].ID]++
	}
	return i, ok
}

// stepped is one orphan of a step: its record as read, and where it goes.
type stepped struct {
	name string
	snap authority.Snapshot
	to   lease.Owner
}

// recoverStep judges a step's orphans again from etcd (their records read
// in shared requests) and re-activates those still orphaned on live nodes
// with one RecoverMany: each its own transaction, compares and outcome, in
// shared etcd requests. See the package doc.
func (c *Controller) recoverStep(ctx context.Context, st *authority.Store, v *view, pl *placer, names []string, guard *authority.Guard, w *warnings) map[outcome]int {
	outs := map[outcome]int{}
	dead := map[string]bool{} // the owners of the orphans it recovered
	ctx, endTrace := traceStep(ctx, len(names))
	defer func() { endTrace(outs, dead) }()
	type warned struct {
		n    int
		name string
		why  error
	}
	news := map[outcome]*warned{} // warnings not logged before, one line per outcome
	note := func(name string, out outcome, why error) {
		outs[out]++
		if out != deferred && w.fresh(name, why) {
			if news[out] == nil {
				news[out] = &warned{name: name, why: why}
			}
			news[out].n++
		}
	}
	defer func() {
		for out, nw := range news {
			c.log.Warn().Str("outcome", string(out)).Int("objects", nw.n).Str("first", nw.name).Err(nw.why).Msg("recovery not done; looking again later")
		}
	}()
	// An orphan no live node may host is not read: no_target at once.
	var read []string
	for _, name := range names {
		if need, ok := v.need(name); ok && !pl.eligible(need) {
			note(name, OutcomeNoTarget, fmt.Errorf("no serving node with weight > 0 hosts %v", need.Types))
			continue
		}
		read = append(read, name)
	}
	names = read
	if len(names) == 0 {
		return outs
	}
	snaps, err := c.readRecords(ctx, st, names)
	if err != nil {
		if ctx.Err() == nil {
			for _, name := range names {
				note(name, OutcomeFailed, err)
			}
		}
		return outs
	}
	moves, err := c.bulkMoves(ctx, st) // bulk.go
	if err != nil {
		if ctx.Err() == nil {
			for _, name := range names {
				note(name, OutcomeFailed, err)
			}
		}
		return outs
	}
	var todo []stepped
	for _, name := range names {
		snap, ok := snaps[name]
		if !ok {
			note(name, OutcomeRaced, nil) // deleted
			continue
		}
		to, out, why := c.judge(v, pl, snap, moves)
		if out != "" {
			note(name, out, why)
			continue
		}
		todo = append(todo, stepped{name: name, snap: snap, to: to})
	}
	if len(todo) == 0 {
		return outs
	}
	reqs := make([]authority.RecoverRequest, len(todo))
	for i, s := range todo {
		reqs[i] = authority.RecoverRequest{
			Seen:     s.snap,
			NewOwner: authority.OwnerRef{ID: s.to.Descriptor.OwnerID, Generation: s.to.Generation},
			Node:     authority.NodeRef{RoutingID: s.to.Descriptor.RoutingID, Address: s.to.Descriptor.Address},
			Guard:    guard,
		}
	}
	if f := c.beforeWrite; f != nil {
		f(reqs)
	}
	results, errs := c.recoverMany(ctx, st, reqs)
	moved := map[string]int{} // recovered per new owner, for the log
	for i, s := range todo {
		res, err := results[i], errs[i]
		switch {
		case err != nil:
			if ctx.Err() != nil {
				continue // the term ended: the next leader looks again
			}
			note(s.name, OutcomeFailed, err)
		case res.GuardLost:
			outs[notLeader]++
		case !res.Written:
			note(s.name, OutcomeRaced, nil)
		default:
			v.observe(res.Snapshot)
			note(s.name, OutcomeRecovered, nil)
			moved[res.Snapshot.Record.Owner.String()]++
			dead[s.snap.Record.Owner.String()] = true
			c.log.Debug().Str("object", s.name).Str("deadOwner", s.snap.Record.Owner.String()).Str("newOwner", res.Snapshot.Record.Owner.String()).
				Int64("objectGeneration", res.Snapshot.Record.ObjectGeneration).Msg("recovered an orphan")
		}
	}
	if n := outs[OutcomeRecovered]; n > 0 {
		c.log.Warn().Int("objects", n).Strs("deadOwners", slices.Sorted(maps.Keys(dead))).Interface("newOwners", moved).
			Str("first", todo[0].name).
			Msg("recovered orphans: re-activated on live nodes with a new object generation; their state of the previous generation is lost (durable objects reload theirs)")
	}
	return outs
}

// judge decides where an orphan read as snap goes: the owner to recover it
// on (outcome ""), or an outcome without a write and why.
func (c *Controller) judge(v *view, pl *placer, snap authority.Snapshot, moves map[string]bulkMove) (lease.Owner, outcome, error) {
	obj, rec := snap.Object, snap.Record
	if rec.Asleep() {
		return lease.Owner{}, OutcomeRaced, nil // put to sleep since it was listed: no orphan
	}
	// The record must be one the view holds its owner dead for: an owner
	// pair that is gone never lives again, and a record at a store version
	// the view has reached names an owner whose key the view has seen.
	if !v.dead(rec.Owner, snap.StoreVersion) {
		return lease.Owner{}, OutcomeRaced, nil
	}
	if in := rec.Intent; in != nil && v.alive(in.Target) && c.now().Before(time.UnixMilli(in.DeadlineMs).Add(c.cfg.Grace)) {
		return lease.Owner{}, deferred, nil // its target may still commit it, with its state
	}
	if c.movingInBulk(v, moves, snap) {
		return lease.Owner{}, deferred, nil // the same, its intent in its bulk's key (bulk.go)
	}

	// Where: a member follows its group; everything else by placement.
	types := typesOf(obj, rec.Members)
	if rec.Group != "" {
		gOwner, exists, alive := v.groupOf(rec.Group)
		switch {
		case exists && !alive:
			return lease.Owner{}, deferred, nil // recovered with its group, which goes first
		case exists:
			for i, o := range pl.owners {
				if o.Descriptor.OwnerID == gOwner.ID && o.Generation == gOwner.Generation && placement.Eligible(pl.cands[i], placement.Need{Types: types}) {
					return o, "", nil
				}
			}
			return lease.Owner{}, OutcomeNoTarget, fmt.Errorf("the owner %s of its group %s cannot host it", gOwner, rec.Group)
		}
	}
	i, ok := pl.choose(obj.String(), placement.Need{Types: types})
	if !ok {
		return lease.Owner{}, OutcomeNoTarget, fmt.Errorf("no serving node with weight > 0 hosts %v", types)
	}
	return pl.owners[i], "", nil
}

// typesOf are the types an object's owner must host: an actor's own, a
// group's members'.
func typesOf(obj keyspace.Object, members []string) []string {
	if obj.Kind != keyspace.KindGroup {
		return []string{obj.Type}
	}
	var types []string
	for _, m := range members {
		if mo, err := keyspace.ParseObject(m); err == nil && mo.Kind == keyspace.KindActor {
			types = append(types, mo.Type)
		}
	}
	return types
}

// readRecords reads the records of names, as many per etcd request as its
// limit on operations allows, a few requests in flight.
func (c *Controller) readRecords(ctx context.Context, st *authority.Store, names []string) (map[string]authority.Snapshot, error) {
	objs := make([]keyspace.Object, 0, len(names))
	for _, name := range names {
		if obj, err := keyspace.ParseObject(name); err == nil { // the view holds no other
			objs = append(objs, obj)
		}
	}
	per := c.cfg.Limits.MaxTxnOps
	if per <= 0 {
		per = authority.DefaultMaxTxnOps
	}
	out := make(map[string]authority.Snapshot, len(objs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	var first error
	sem := make(chan struct{}, readsInFlight)
	for start := 0; start < len(objs); start += per {
		part := objs[start:min(start+per, len(objs))]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rv, err := st.ReadMany(ctx, part, nil)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				first = cmpErr(first, err)
				return
			}
			maps.Copy(out, rv.Objects)
		})
	}
	wg.Wait()
	return out, first
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
