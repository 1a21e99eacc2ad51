package hosted

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lifecycle"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Sleep (docs/developing/lifecycle.md): an idle object of a type that may sleep
// leaves this node's memory; its record, in one fenced transaction, says
// it sleeps and names no owner. pkg/lifecycle decides when; this file
// gathers its facts and carries the sleep out on the object's mailbox, so
// no handler runs while it does and every change before it was persisted
// (a durable object persists before each reply).

// Used notes that h ran a request at now (idleness is measured from it).
func (h *Object) Used(now time.Time) { h.used.Store(now.UnixNano()) }

// factsLocked are the sleep rule's facts about h at now (h.Mu held).
// onMailbox: judged from h's own drain (which is then the one running);
// pressed: for the memory limits (pressure.go).
func (h *Object) factsLocked(now time.Time, onMailbox, pressed bool) lifecycle.Facts {
	timers := 0
	if h.Timers != nil {
		timers = h.Timers.Len()
	}
	return lifecycle.Facts{
		After:   lifecycle.SleepAfter(h.Typ.SleepAfter, h.env.cfg.SleepAfter),
		Sleeps:  h.Typ.Sleeps(),
		IdleFor: now.Sub(time.Unix(0, h.used.Load())),
		Serving: h.Ready == closedReady && h.FailReply == nil && !h.Closed && !h.Lost && !h.Relocating &&
			h.Mode == ModeServing && h.Mv == nil,
		Busy:     len(h.Queue) > 0 || h.Running && !onMailbox,
		Grouped:  h.obj.Kind == keyspace.KindGroup || h.Rec.full != nil && h.Rec.full.Record.Group != "",
		Sessions: len(h.Sessions), Outbox: h.Outbox.Len(), Timers: timers, Pressed: pressed,
		ReminderIn: h.reminderInLocked(now),
	}
}

// MaySleep is the sleep rule's verdict on h at now, judged off its mailbox
// (the sweep's first look; Sleep judges again on the mailbox); pressed:
// for the memory limits.
func (h *Object) MaySleep(now time.Time, pressed bool) lifecycle.Reason {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	return lifecycle.Judge(h.factsLocked(now, false, pressed))
}

// Sleep puts h to sleep if the rule still allows it when its turn comes on
// its mailbox; the reason it stayed awake otherwise ("raced": the record
// changed first). A request that arrived meanwhile is answered
// CODE_UNAVAILABLE: its retry wakes the object where placement chooses. An
// error is a sleep whose outcome etcd left unknown: h is dropped all the
// same.
func (h *Object) Sleep(ctx context.Context, pressed bool) (lifecycle.Reason, error) {
	var why lifecycle.Reason
	var err error
	w := &Work{Done: make(chan *pb.CallReply, 1)}
	w.Fn = func() { why, err = h.sleepOnMailbox(pressed) }
	if !h.Submit(w) {
		return lifecycle.NotServing, nil
	}
	select {
	case r := <-w.Done:
		if r != nil { // closed before its turn
			return lifecycle.NotServing, nil
		}
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return why, err
}

// raced is the reason of a sleep whose record changed under it.
const raced lifecycle.Reason = "its record changed first"

func (h *Object) sleepOnMailbox(pressed bool) (lifecycle.Reason, error) {
	n := h.env
	h.Mu.Lock()
	if why := lifecycle.Judge(h.factsLocked(n.now(), true, pressed)); why != lifecycle.Sleep {
		h.Mu.Unlock()
		return why, nil
	}
	h.Relocating, h.Sleeping = true, true // claimed: no relocation starts while etcd decides
	seen := h.Rec.Snapshot(h)
	h.Mu.Unlock()
	release := func() {
		h.Mu.Lock()
		h.Relocating, h.Sleeping = false, false
		h.Mu.Unlock()
	}
	if h.Typ.Durable && !n.writeBehind() && h.unpersisted() {
		release()
		return lifecycle.Unpersisted, nil
	}
	ctx, cancel := n.durableCtx()
	defer cancel()
	res, err := n.store.Sleep(ctx, authority.SleepRequest{Seen: seen, Owner: n.self})
	if err == nil && !res.Written && res.Found && res.Snapshot.Record.Asleep() {
		// Put to sleep by a write not this one (the outcome of an
		// earlier attempt, or someone else's): it sleeps all the same.
		res.Written = true
	}
	switch {
	case err != nil:
		// It may have gone to sleep: it must not serve on (another node
		// could wake it). Dropped as if it slept; the next call finds in
		// etcd whether it sleeps (wake) or is still this node's (loaded
		// again: a durable object's state is in etcd).
		n.metrics.Lifecycle.Sleeps.WithLabelValues("failed").Inc()
		err = fmt.Errorf("sleep %s: %w (dropped)", h.name, err)
	case !res.Written:
		release()
		if res.Found {
			n.cache.Observe(res.Snapshot)
		}
		n.metrics.Lifecycle.Sleeps.WithLabelValues("raced").Inc()
		return raced, nil
	default:
		n.metrics.Lifecycle.Sleeps.WithLabelValues("slept").Inc()
		n.cache.Observe(res.Snapshot)
	}
	h.retire(h.name + " went to sleep; a retry with the same operation id wakes it")
	return lifecycle.Sleep, err
}

// retire ends h here once etcd released it (it sleeps, or was deleted):
// no longer hosted, closed, timers stopped, and its queued requests
// answered UNAVAILABLE with why (their retries find what etcd says now).
// On the mailbox.
func (h *Object) retire(why string) {
	n := h.env
	n.unhost(h)
	h.Mu.Lock()
	h.Closed, h.Relocating, h.Sleeping, h.Ending = true, false, false, false
	if h.timer != nil {
		h.timer.Stop()
	}
	q := h.Queue
	h.Queue = nil
	h.Mu.Unlock()
	for _, w := range q {
		n.unroute(w)
		h.Answer(w, &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE, Message: why})
	}
}

// unpersisted reports whether a durable h's state differs from the one it
// last persisted (or is not known): it must not sleep on a change etcd does
// not hold. On the mailbox: no handler runs.
func (h *Object) unpersisted() bool {
	if h.Dur == nil {
		return true
	}
	var state []byte
	if err := h.Guard("Snapshot", func() (err error) { state, err = h.Inst.Snapshot(); return err }); err != nil {
		return true
	}
	return !bytes.Equal(state, h.Dur.state)
}
