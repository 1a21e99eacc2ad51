package drain

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// A drain's moves: one object on its own (a group, a large state), the
// bulk moves of the others, and the drain's report of each.

// outcomeRefused is the outcome of an object of a bulk move that was not
// started: nothing written, the object serving where it was.
const outcomeRefused = api.OutcomeRefused

// move relocates one object away, retrying an attempt that did not move it
// (another target first) up to d.attempts, within the drain's deadline.
func (d *drainer) move(name string) {
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
			d.fail(name, attempt, OrDefault(lastCode, pb.Code_CODE_SHUTTING_DOWN), why)
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
		timeout := min(d.p.RelocationTimeout, d.deadline().Sub(d.p.Clock.Now()))
		d.reserve(tid, 1)
		res := d.host.MoveOne(d.ctx, name, tid, timeout)
		st, err := res.Status, res.Err
		d.reserve(tid, -1)
		switch {
		case res.Busy:
			// Someone else (an operator, a rebalancer) moves it now: wait
			// for that relocation to end (a change of the hosted objects),
			// then look again.
			attempt--
			d.waitFor(d.host.HostedChanged(), time.Second)
			continue
		case res.NotHosted:
			if !d.host.IsHosted(name) {
				d.p.Log.Debug().Str("object", name).Msg("drain: object left by other means")
				return // gone: moved by someone else, or lost (its relocation said so)
			}
			lastCode, lastWhy = pb.Code_CODE_UNAVAILABLE, err.Error()
		case err != nil:
			lastCode, lastWhy = pb.Code_CODE_UNAVAILABLE, err.Error()
			if res.NoTarget {
				tried[tid] = true
			}
		default:
			d.mu.Lock()
			d.report.Relocations++
			d.mu.Unlock()
			switch st.GetOutcome() {
			case "completed":
				d.moved(MovedObject{Object: name, Target: tpair, RelocationID: st.GetRelocationId(), Attempts: attempt,
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
		d.retry(Event{Object: name, Target: tpair, Attempt: attempt, Code: lastCode, Message: lastWhy})
	}
}

func (d *drainer) retry(ev Event) {
	ev.Kind = Retry
	d.p.Outcomes.WithLabelValues("retried").Inc()
	d.p.Log.Debug().Str("object", ev.Object).Str("to", ev.Target).Int("attempt", ev.Attempt).Str("reason", ev.Message).Msg("drain: attempt did not move the object")
	d.emit(ev)
}

func (d *drainer) waitDirectory(max time.Duration) { d.waitFor(d.host.DirectoryChanged(), max) }

// waitFor returns when ch fires, after max, or when the drain or the node
// stops.
func (d *drainer) waitFor(ch <-chan struct{}, max time.Duration) {
	t := d.p.Clock.NewTimer(max)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C():
	case <-d.ctx.Done():
	case <-d.host.Stopping():
	}
}

// noTargetFor is how long no target has been found for objects of type typ
// (0 on the first miss).
func (d *drainer) noTargetFor(typ string) time.Duration {
	now := d.p.Clock.Now()
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
	all, err := d.host.Targets(obj.Type)
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
		return float64(d.host.Count(o.Descriptor.OwnerID)+d.assigned[o.Descriptor.OwnerID]) / float64(o.Descriptor.Weight)
	}
	best := cands[0]
	for _, c := range cands[1:] {
		if load(c) < load(best) {
			best = c
		}
	}
	return best, nil
}

func (d *drainer) moved(m MovedObject) {
	d.mu.Lock()
	d.report.Moved = append(d.report.Moved, m)
	d.ended[m.Object] = true
	d.lastMove = d.p.Clock.Now()
	d.mu.Unlock()
	d.p.Outcomes.WithLabelValues("moved").Inc()
	d.p.Log.Debug().Str("object", m.Object).Str("to", m.Target).Int("attempts", m.Attempts).Msg("drain: moved")
	d.emit(Event{Kind: Moved, Object: m.Object, Target: m.Target, Attempt: m.Attempts, Code: pb.Code_CODE_OK,
		RelocationID: m.RelocationID, Interruption: m.Interruption})
}

func (d *drainer) fail(name string, attempts int, code pb.Code, why string) {
	d.mu.Lock()
	if d.ended[name] {
		d.mu.Unlock()
		return // reported already
	}
	d.ended[name] = true
	d.report.Failed = append(d.report.Failed, Failure{Object: name, Code: code, Reason: why, Attempts: attempts})
	d.mu.Unlock()
	d.p.Outcomes.WithLabelValues("failed").Inc()
	d.p.Log.Warn().Str("object", name).Int("attempts", attempts).Str("code", wire.CodeName(code)).Str("reason", why).
		Msg("drain: object not moved (lost when the node stops)")
	d.emit(Event{Kind: Failed, Object: name, Attempt: attempts, Code: code, Message: why})
}

// bulk runs one bulk move of the loop's and reports each object: moved,
// failed (lost, or the node stopping), or not moved yet — its attempt
// recorded, with its target as tried, for the loop to try again (another
// target first), until d.attempts.
func (d *drainer) bulk(j drainJob) {
	tid := j.target.Descriptor.OwnerID
	tpair := fmt.Sprintf("%s@%d", tid, j.target.Generation)
	names := make([]string, len(j.hs))
	for i, h := range j.hs {
		names[i] = h.Name()
	}
	defer d.reserve(tid, -len(j.hs))
	timeout := min(d.p.RelocationTimeout, d.deadline().Sub(d.p.Clock.Now()))
	if timeout < minAttempt {
		return // the loop sees the deadline and reports them
	}
	outs := d.host.MoveBulk(d.ctx, names, j.target, timeout)
	d.mu.Lock()
	d.report.Relocations += len(outs)
	d.report.Bulks++
	d.mu.Unlock()
	for i, o := range outs {
		h := j.hs[i]
		switch o.Outcome {
		case "completed":
			d.moved(MovedObject{Object: o.Object, Target: tpair, RelocationID: o.ID[:], Attempts: d.attempt(h, tid, 0, ""),
				Interruption: o.Interruption})
		case "aborted", outcomeRefused:
			if o.Alone {
				d.mu.Lock()
				d.report.Relocations--
				d.alone[h] = true // a group's member: it moves with its group, on its own
				d.mu.Unlock()
				continue
			}
			if o.Outcome == outcomeRefused {
				d.mu.Lock()
				d.report.Relocations--
				d.mu.Unlock()
			}
			why := fmt.Sprintf("relocation to %s %s: %s", tpair, o.Outcome, o.Message)
			if o.Outcome == outcomeRefused && !d.host.IsHosted(o.Object) {
				continue // gone by other means: the loop forgets it
			}
			k := d.attempt(h, tid, o.Code, why)
			if k >= d.attempts {
				d.fail(o.Object, k, o.Code, why)
				continue
			}
			d.retry(Event{Object: o.Object, Target: tpair, Attempt: k, Code: o.Code, Message: why})
		default:
			// failed (the object is lost: every pending request was
			// answered Unavailable) or shutdown (the node stops).
			d.fail(o.Object, d.attempt(h, tid, o.Code, o.Message), o.Code, fmt.Sprintf("relocation to %s %s: %s", tpair, o.Outcome, o.Message))
		}
	}
}

// attempt records one attempt to move h to the owner tid (why it did not
// move it, if it did not) and returns the attempts so far.
func (d *drainer) attempt(h Hosted, tid string, code pb.Code, why string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.tries[h]
	if t == nil {
		t = &drainTries{tried: map[string]bool{}}
		d.tries[h] = t
	}
	t.attempts++
	t.tried[tid] = true
	if why != "" {
		t.code, t.why = code, why
	}
	return t.attempts
}

// triesOf is what earlier attempts left for h (nil: none).
func (d *drainer) triesOf(h Hosted) *drainTries {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.tries[h]
}

// attemptsOf is how often h was tried.
func (d *drainer) attemptsOf(h Hosted) int {
	if t := d.triesOf(h); t != nil {
		return t.attempts
	}
	return 0
}

// settled reports whether the object was reported moved or failed.
func (d *drainer) settled(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ended[name]
}
