package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The drainer: the worker loop of one drain (Drain, drain.go), which hands
// hosted objects to at most Concurrency moves at a time.

// drainer is one drain's loop and its workers.
type drainer struct {
	n        *Node
	ctx      context.Context
	deadline time.Time
	timeout  time.Duration
	conc     int
	attempts int
	run      *drainRun

	mu       sync.Mutex
	report   *DrainReport
	assigned map[string]int       // objects being moved to each owner id now (spreads the drain)
	noTarget map[string]time.Time // object type -> since when no node can take it
}

// stopReason is why no new attempt may start ("" when one may).
func (d *drainer) stopReason() string {
	select {
	case <-d.n.stopping:
		return "the node is stopping"
	default:
	}
	if d.ctx.Err() != nil {
		return "drain cancelled: " + d.ctx.Err().Error()
	}
	if d.deadline.Sub(d.n.now()) < minDrainAttempt {
		return fmt.Sprintf("drain deadline (%s) passed", d.timeout)
	}
	return ""
}

func (d *drainer) emit(ev DrainEvent) {
	d.mu.Lock()
	ev.Moved, ev.Failed = len(d.report.Moved), len(d.report.Failed)
	d.mu.Unlock()
	ev.Remaining = d.n.Hosted()
	d.run.emit(ev)
}

// drainBackstop bounds how long the drain loop waits without a signal.
const drainBackstop = 250 * time.Millisecond

// loop hands hosted objects to at most conc workers until none is left (but
// those that failed), no target stage is in flight, or the drain must stop.
func (d *drainer) loop() {
	n := d.n
	d.emit(DrainEvent{Kind: DrainStarted})
	results := make(chan *hosted)
	inflight := map[*hosted]bool{}
	done := map[*hosted]bool{}
	var wg sync.WaitGroup
	for {
		// Taken before the scan: a change during it wakes the select.
		changed := n.hostedChanged()
		if why := d.stopReason(); why != "" {
			d.report.EndedEarly = why
			break
		}
		cands, idle := n.drainable(inflight, done)
		if idle && len(inflight) == 0 {
			break
		}
		stop := false
		for _, h := range cands {
			if len(inflight) >= d.conc {
				break
			}
			// A test build's failpoint during drain, between objects.
			if err := drainStep(); err != nil {
				d.report.EndedEarly = err.Error()
				stop = true
				break
			}
			inflight[h] = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				d.move(h.name)
				results <- h
			}()
		}
		if stop {
			break
		}
		// The hosted objects' next change wakes the loop; the backstop
		// timer, a change nothing signals (an activation ending).
		backstop := n.clock.NewTimer(drainBackstop)
		select {
		case h := <-results:
			delete(inflight, h)
			done[h] = true
		case <-changed:
		case <-backstop.C():
		case <-d.ctx.Done():
		case <-n.stopping:
		}
		backstop.Stop()
	}
	for len(inflight) > 0 {
		h := <-results
		delete(inflight, h)
		done[h] = true
	}
	wg.Wait()
	// Whatever is still hosted and was not handled stays: it is lost when
	// the node stops.
	n.mu.Lock()
	var left []*hosted
	for _, h := range n.objects {
		if !done[h] {
			left = append(left, h)
		}
	}
	n.mu.Unlock()
	slices.SortFunc(left, func(a, b *hosted) int { return strings.Compare(a.name, b.name) })
	why := d.report.EndedEarly
	if why == "" {
		why = "not movable"
	}
	for _, h := range left {
		d.fail(h.name, 0, pb.Code_CODE_SHUTTING_DOWN, "not moved: "+why)
	}
}

// drainable lists the hosted objects a worker may take now (serving, not
// relocating, not taken), by name; idle reports that nothing hosted here is
// left to handle and no target stage is in flight.
func (n *Node) drainable(inflight, done map[*hosted]bool) (cands []*hosted, idle bool) {
	n.mu.Lock()
	hs := make([]*hosted, 0, len(n.objects))
	for _, h := range n.objects {
		hs = append(hs, h)
	}
	n.mu.Unlock()
	idle = true
	for _, h := range hs {
		if done[h] {
			continue
		}
		idle = false
		if inflight[h] {
			continue
		}
		select {
		case <-h.ready:
		default:
			continue // activating
		}
		if h.failReply != nil {
			continue
		}
		h.mu.Lock()
		ok := !h.closed && h.mode == modeServing && !h.relocating
		h.mu.Unlock()
		if ok {
			cands = append(cands, h)
		}
	}
	slices.SortFunc(cands, func(a, b *hosted) int { return strings.Compare(a.name, b.name) })
	return cands, idle && n.targetStages() == 0
}

// targetStages counts the relocations in flight with this node as target.
func (n *Node) targetStages() int { return n.relocs.inFlight("target") }

// move relocates one object away, retrying an attempt that did not move it
// (another target first) up to d.attempts, within the drain's deadline.
func (d *drainer) move(name string) {
	n := d.n
	obj, err := keyspace.ParseObject(name)
	if err != nil {
		d.fail(name, 0, pb.Code_CODE_INTERNAL, err.Error())
		return
	}
	tried := map[string]bool{}
	attempt := 0
	var lastCode pb.Code
	lastWhy := ""
	for {
		if why := d.stopReason(); why != "" {
			if lastWhy != "" {
				why += "; last attempt: " + lastWhy
			}
			d.fail(name, attempt, orDefault(lastCode, pb.Code_CODE_SHUTTING_DOWN), why)
			return
		}
		target, err := d.target(obj, tried)
		if err != nil {
			// No node can take the type: wait a little for one (a node
			// restarting in a rolling restart), shared by every object of
			// the type, then give up on them all at once.
			lastCode, lastWhy = pb.Code_CODE_UNAVAILABLE, err.Error()
			if d.noTargetFor(obj.Type) >= noTargetWait {
				d.fail(name, attempt, lastCode, lastWhy)
				return
			}
			d.waitDirectory(250 * time.Millisecond)
			continue
		}
		d.targetFound(obj.Type)
		attempt++
		tid := target.Descriptor.OwnerID
		tpair := fmt.Sprintf("%s@%d", tid, target.Generation)
		timeout := min(n.cfg.RelocationTimeout, d.deadline.Sub(n.now()))
		d.reserve(tid, 1)
		st, err := n.Relocate(d.ctx, name, RelocateOptions{Target: tid, Timeout: timeout, Foreground: true})
		d.reserve(tid, -1)
		switch {
		case errors.Is(err, ErrAlreadyRelocating):
			// Someone else (an operator, a rebalancer) moves it now: wait
			// for that relocation to end (a change of the hosted objects),
			// then look again.
			attempt--
			d.waitFor(n.hostedChanged(), time.Second)
			continue
		case errors.Is(err, ErrNotHosted):
			if !n.isHosted(name) {
				n.log.Debug().Str("object", name).Msg("drain: object left by other means")
				return // gone: moved by someone else, or lost (its relocation said so)
			}
			lastCode, lastWhy = pb.Code_CODE_UNAVAILABLE, err.Error()
		case err != nil:
			lastCode, lastWhy = pb.Code_CODE_UNAVAILABLE, err.Error()
			if errors.Is(err, ErrNoTarget) {
				tried[tid] = true
			}
		default:
			d.mu.Lock()
			d.report.Relocations++
			d.mu.Unlock()
			switch st.GetOutcome() {
			case "completed":
				d.moved(DrainedObject{Object: name, Target: tpair, RelocationID: st.GetRelocationId(), Attempts: attempt,
					Interruption: time.Duration(st.GetInterruptionUs()) * time.Microsecond})
				return
			case "aborted":
				// The source kept the object: try again, elsewhere first.
				tried[tid] = true
				lastCode, lastWhy = st.GetCode(), fmt.Sprintf("relocation to %s aborted: %s", tpair, st.GetMessage())
			default:
				// failed (the object is lost: every pending request was
				// answered Unavailable) or shutdown (the node stops).
				d.fail(name, attempt, st.GetCode(), fmt.Sprintf("relocation to %s %s: %s", tpair, st.GetOutcome(), st.GetMessage()))
				return
			}
		}
		if attempt >= d.attempts {
			d.fail(name, attempt, lastCode, lastWhy)
			return
		}
		d.retry(DrainEvent{Object: name, Target: tpair, Attempt: attempt, Code: lastCode, Message: lastWhy})
	}
}

func (d *drainer) retry(ev DrainEvent) {
	ev.Kind = DrainRetry
	d.n.metrics.drained.WithLabelValues("retried").Inc()
	d.n.log.Debug().Str("object", ev.Object).Str("to", ev.Target).Int("attempt", ev.Attempt).Str("reason", ev.Message).Msg("drain: attempt did not move the object")
	d.emit(ev)
}

// isHosted reports whether an object of this name is hosted here.
func (n *Node) isHosted(name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.objects[name]
	return ok
}

func (d *drainer) waitDirectory(max time.Duration) { d.waitFor(d.n.dir.Changed(), max) }

// waitFor returns when ch fires, after max, or when the drain or the node
// stops.
func (d *drainer) waitFor(ch <-chan struct{}, max time.Duration) {
	t := d.n.clock.NewTimer(max)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C():
	case <-d.ctx.Done():
	case <-d.n.stopping:
	}
}

// noTargetFor is how long no target has been found for objects of type typ
// (0 on the first miss).
func (d *drainer) noTargetFor(typ string) time.Duration {
	now := d.n.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	since, ok := d.noTarget[typ]
	if !ok {
		d.noTarget[typ] = now
		return 0
	}
	return now.Sub(since)
}

func (d *drainer) targetFound(typ string) {
	d.mu.Lock()
	delete(d.noTarget, typ)
	d.mu.Unlock()
}

func (d *drainer) reserve(id string, k int) {
	d.mu.Lock()
	d.assigned[id] += k
	d.mu.Unlock()
}

// target chooses where an object goes: an eligible owner (targets),
// preferring owners not tried yet for this object, and among them the one
// with the fewest objects per unit of weight (counting the moves of this
// drain in flight), so a drain spreads its objects instead of piling them
// on one node.
func (d *drainer) target(obj keyspace.Object, tried map[string]bool) (lease.Owner, error) {
	n := d.n
	all, err := n.targets(n.need(obj.Type), "")
	if err != nil {
		return lease.Owner{}, fmt.Errorf("%w (for %s)", err, obj)
	}
	var fresh []lease.Owner
	for _, o := range all {
		if !tried[o.Descriptor.OwnerID] {
			fresh = append(fresh, o)
		}
	}
	cands := fresh
	if len(cands) == 0 {
		cands = all
	}
	rand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	d.mu.Lock()
	defer d.mu.Unlock()
	load := func(o lease.Owner) float64 {
		return float64(n.cache.Count(o.Descriptor.OwnerID)+d.assigned[o.Descriptor.OwnerID]) / float64(o.Descriptor.Weight)
	}
	best := cands[0]
	for _, c := range cands[1:] {
		if load(c) < load(best) {
			best = c
		}
	}
	return best, nil
}

func (d *drainer) moved(m DrainedObject) {
	d.mu.Lock()
	d.report.Moved = append(d.report.Moved, m)
	d.mu.Unlock()
	d.n.metrics.drained.WithLabelValues("moved").Inc()
	d.n.log.Debug().Str("object", m.Object).Str("to", m.Target).Int("attempts", m.Attempts).Msg("drain: moved")
	d.emit(DrainEvent{Kind: DrainMoved, Object: m.Object, Target: m.Target, Attempt: m.Attempts, Code: pb.Code_CODE_OK,
		RelocationID: m.RelocationID, Interruption: m.Interruption})
}

func (d *drainer) fail(name string, attempts int, code pb.Code, why string) {
	d.mu.Lock()
	d.report.Failed = append(d.report.Failed, DrainFailure{Object: name, Code: code, Reason: why, Attempts: attempts})
	d.mu.Unlock()
	d.n.metrics.drained.WithLabelValues("failed").Inc()
	d.n.log.Warn().Str("object", name).Int("attempts", attempts).Str("code", wire.CodeName(code)).Str("reason", why).
		Msg("drain: object not moved (lost when the node stops)")
	d.emit(DrainEvent{Kind: DrainFailed, Object: name, Attempt: attempts, Code: code, Message: why})
}
