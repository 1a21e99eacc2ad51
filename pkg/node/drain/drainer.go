package drain

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The drainer: the loop of one drain, which hands the hosted objects to
// bulk moves, at most Concurrency objects in flight; a group, or an object
// whose state is too large to go in a bulk, moves on its own (move.go).

// MaxBulk is how many objects one bulk move carries at most (a drain's,
// and the node's RelocateMany's).
const MaxBulk = 128

// bulkStateBytes: an object whose state is known to be larger moves on
// its own (a bulk move's frames share one stream and its run).
const bulkStateBytes = 1 << 20

// drainer is one drain's loop and its workers.
type drainer struct {
	host     Host
	p        Params
	ctx      context.Context
	start    time.Time
	timeout  time.Duration // how long the drain may go without moving an object
	conc     int
	attempts int
	run      *Run

	mu       sync.Mutex
	report   *Report
	lastMove time.Time            // the start, then the last object moved: the deadline follows it
	assigned map[string]int       // objects being moved to each owner id now (spreads the drain)
	noTarget map[string]time.Time // object type -> since when no node can take it
	tries    map[Hosted]*drainTries
	ended    map[string]bool // objects reported moved or failed
	alone    map[Hosted]bool // objects a bulk move refused: they move on their own
}

// drainTries is what earlier attempts to move one object left: how many,
// the targets tried, and why the last did not move it.
type drainTries struct {
	attempts int
	tried    map[string]bool
	code     pb.Code
	why      string
}

// deadline is when the drain gives up: --drain-timeout after the last
// object it moved (or its start), at most MaxTimeout after its start.
// A drain that keeps moving objects is not cut off; one that stalls is.
func (d *drainer) deadline() time.Time {
	d.mu.Lock()
	last := d.lastMove
	d.mu.Unlock()
	return minTime(last.Add(d.timeout), d.start.Add(MaxTimeout))
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// stopReason is why no new attempt may start ("" when one may).
func (d *drainer) stopReason() string {
	select {
	case <-d.host.Stopping():
		return "the node is stopping"
	default:
	}
	if d.ctx.Err() != nil {
		return "drain cancelled: " + d.ctx.Err().Error()
	}
	now := d.p.Clock.Now()
	if d.deadline().Sub(now) < minAttempt {
		if now.Sub(d.start) >= MaxTimeout-minAttempt {
			return fmt.Sprintf("the drain ran for %s, the longest a drain may", MaxTimeout)
		}
		return fmt.Sprintf("no object moved for %s (the drain timeout)", d.timeout)
	}
	return ""
}

func (d *drainer) emit(ev Event) {
	d.mu.Lock()
	ev.Moved, ev.Failed = len(d.report.Moved), len(d.report.Failed)
	d.mu.Unlock()
	ev.Remaining = d.host.Hosted()
	d.run.Emit(ev)
}

// drainBackstop bounds how long the drain loop waits without a signal.
const drainBackstop = 250 * time.Millisecond

// drainJob is one move the loop started: a bulk move of hs to target, or
// one object on its own (target zero).
type drainJob struct {
	hs     []Hosted
	target lease.Owner
}

// loop hands hosted objects to moves, at most conc objects in flight,
// until none is left (but those that failed), no target stage is in
// flight, or the drain must stop.
//
// Every pass over the hosted objects costs O(objects), so the loop makes one
// at the start and then works from its queue: an object that cannot move yet
// (activating, relocating, no target now) waits in later until the hosted
// objects or the directory change. A new pass runs only when the queue and
// later are empty and nothing is in flight (objects that arrived meanwhile:
// a target stage that finished). So a drain of N objects costs O(N) beside
// its moves, not O(N) per move.
func (d *drainer) loop() {
	d.emit(Event{Kind: Started})
	results := make(chan drainJob)
	inflight := map[Hosted]bool{}
	done := map[Hosted]bool{}
	var queue, later []Hosted
	var wg sync.WaitGroup
	launch := func(j drainJob) {
		for _, h := range j.hs {
			inflight[h] = true
		}
		wg.Go(func() {
			if j.target.Generation == 0 {
				d.move(j.hs[0].Name())
			} else {
				d.bulk(j)
			}
			results <- j
		})
	}
	finished := func(j drainJob) {
		for _, h := range j.hs {
			delete(inflight, h)
			if d.settled(h.Name()) || d.host.Current(h.Name()) != h {
				done[h] = true // moved, given up, or gone by other means
			} else {
				queue = append(queue, h) // not moved yet: another attempt (drain_move.go)
			}
		}
	}
	fresh := true // something new may start: dispatch
	for {
		// Taken before the scan: a change during it wakes the select.
		changed, dirChanged := d.host.HostedChanged(), d.host.DirectoryChanged()
		if why := d.stopReason(); why != "" {
			d.report.EndedEarly = why
			break
		}
		if len(queue) == 0 && len(inflight) == 0 {
			if len(later) > 0 {
				queue, later = later, nil
			} else if queue = d.host.Undone(done); len(queue) == 0 && d.host.TargetStages() == 0 {
				break
			}
			fresh = true
		}
		if fresh {
			var stop bool
			queue, later, stop = d.dispatch(queue, later, inflight, done, launch)
			if stop {
				break
			}
		}
		// A move's end, the hosted objects' or the directory's next
		// change wakes the loop; the backstop timer, a change nothing
		// signals (an activation ending). Only what can start something
		// new dispatches again: a move's end (its slots), or objects back
		// from later.
		backstop := d.p.Clock.NewTimer(drainBackstop)
		fresh = len(later) > 0
		select {
		case j := <-results:
			finished(j)
			fresh = true
		case <-changed:
			queue, later = append(queue, later...), nil
		case <-dirChanged:
			queue, later = append(queue, later...), nil
		case <-backstop.C():
			queue, later = append(queue, later...), nil
		case <-d.ctx.Done():
		case <-d.host.Stopping():
		}
		backstop.Stop()
	}
	for len(inflight) > 0 {
		j := <-results
		for _, h := range j.hs {
			delete(inflight, h)
			done[h] = true
		}
	}
	wg.Wait()
	// Whatever is still hosted and was not moved stays: it is lost when the
	// node stops.
	why := d.report.EndedEarly
	if why == "" {
		why = "not movable"
	}
	for _, h := range d.host.Undone(done) {
		code, last := pb.Code_CODE_SHUTTING_DOWN, ""
		if t := d.triesOf(h); t != nil && t.why != "" {
			code, last = OrDefault(t.code, code), "; last attempt: "+t.why
		}
		d.fail(h.Name(), d.attemptsOf(h), code, "not moved: "+why+last)
	}
}

// dispatch starts moves for the objects of queue while fewer than conc are
// in flight. Objects that may move now fill a bulk move to the least
// loaded target (d.target) up to MaxBulk objects, then the next one:
// every bulk but the last of a pass is full, and the drain spreads its
// objects bulk by bulk. An object the current bulk's target cannot take
// (another type; a target it was tried on) starts a bulk of its own. A
// group or a large state moves alone. Partial bulks are started only when
// the queue ran out or nothing is in flight; otherwise their objects wait
// at the queue's head for the slots the next finished move frees. It
// returns what is left of queue and later, and whether the drain must stop
// (a test build's failpoint).
func (d *drainer) dispatch(queue, later []Hosted, inflight, done map[Hosted]bool, launch func(drainJob)) ([]Hosted, []Hosted, bool) {
	batches := map[string]*drainJob{}
	var order []string
	pending := 0
	var cur *drainJob
	width := d.bulkWidth(queue)
	start := func(j *drainJob) {
		pending -= len(j.hs)
		launch(*j)
		delete(batches, j.target.Descriptor.OwnerID)
		if cur == j {
			cur = nil
		}
	}
	for len(queue) > 0 && len(inflight)+pending < d.conc {
		h := queue[0]
		queue[0] = nil
		queue = queue[1:]
		if done[h] || inflight[h] {
			continue
		}
		switch h.Verdict() {
		case Gone:
			done[h] = true
			continue
		case Later:
			later = append(later, h)
			continue
		}
		// A test build's failpoint during drain, between objects.
		if err := d.host.Step(); err != nil {
			d.report.EndedEarly = err.Error()
			for _, id := range order {
				if j := batches[id]; j != nil {
					start(j)
				}
			}
			return queue, later, true
		}
		if !bulkable(h) || d.isAlone(h) {
			launch(drainJob{hs: []Hosted{h}})
			continue
		}
		var tried map[string]bool
		if t := d.triesOf(h); t != nil {
			tried = t.tried
		}
		j := cur
		if j == nil || tried[j.target.Descriptor.OwnerID] || !d.host.Takes(j.target, h.Object().Type) {
			target, err := d.target(h.Object(), tried)
			if err != nil {
				// No node can take the type: wait a little for one (a
				// node restarting in a rolling restart), shared by every
				// object of the type, then give up on them all.
				if d.noTargetFor(h.Object().Type) >= noTargetWait {
					d.fail(h.Name(), d.attemptsOf(h), pb.Code_CODE_UNAVAILABLE, err.Error())
					done[h] = true
				} else {
					later = append(later, h)
				}
				continue
			}
			d.targetFound(h.Object().Type)
			id := target.Descriptor.OwnerID
			if j = batches[id]; j == nil {
				j = &drainJob{target: target}
				batches[id] = j
				order = append(order, id)
			}
			if cur == nil {
				cur = j
			}
		}
		j.hs = append(j.hs, h)
		d.reserve(j.target.Descriptor.OwnerID, 1)
		pending++
		if len(j.hs) >= width {
			start(j)
		}
	}
	for _, id := range order {
		j := batches[id]
		if j == nil {
			continue
		}
		if len(queue) == 0 || len(inflight) == 0 {
			start(j)
			continue
		}
		// Not full, and more to come: its objects wait for the next slots.
		// (order may name id twice, when a bulk to it started full and
		// another began: each batch is handled once.)
		delete(batches, id)
		d.reserve(id, -len(j.hs))
		queue = append(j.hs, queue...)
	}
	return queue, later, false
}

// bulkWidth is how many objects one bulk move of this pass carries:
// MaxBulk, or fewer when the queue is short, so that even a small drain
// spreads its objects over every node that can take them.
func (d *drainer) bulkWidth(queue []Hosted) int {
	if len(queue) >= MaxBulk*4 || len(queue) == 0 {
		return MaxBulk
	}
	all, err := d.host.Targets(queue[0].Object().Type)
	if err != nil || len(all) < 2 {
		return MaxBulk
	}
	return max(1, min(MaxBulk, (len(queue)+len(all)-1)/len(all)))
}

// isAlone reports whether a bulk move refused h (it moves on its own).
func (d *drainer) isAlone(h Hosted) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.alone[h]
}

// bulkable: h may move in a bulk move — an actor whose state is not known
// to be large. A group's member is refused by the bulk move and moves with
// its group (drain_move.go).
func bulkable(h Hosted) bool {
	return h.Object().Kind == keyspace.KindActor && h.StateBytes() <= bulkStateBytes
}

// Verdict is what a drain may do with a hosted object now.
type Verdict int

// The verdicts.
const (
	Now   Verdict = iota // serving, not relocating: move it
	Later                // activating, or relocating now: look again later
	Gone                 // failed to activate, closed: nothing to move
)
