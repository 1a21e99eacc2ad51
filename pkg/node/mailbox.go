package node

import (
	"context"
	"fmt"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// A hosted object's mailbox through a relocation: the methods below are
// the only code that moves work between its queues (queue, captured,
// boundary, held, waiting), each one what a relocation action asks for
// (mailbox_source.go, mailbox_target.go carry the actions out).

// sealStart stops dispatch: requests arriving from now on are kept as the
// boundary. It returns a channel closed once the handler in progress (if
// any) finished, or nil when none runs.
func (h *hosted) sealStart() chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mode = modeBoundary
	h.resetDeliveryLocked() // answers of sends in flight are dropped (message_delivery.go)
	if h.running {
		m := h.moving()
		if m.sealWait == nil {
			m.sealWait = make(chan struct{})
		}
		return m.sealWait
	}
	return nil
}

func waitSealed(ctx context.Context, wait chan struct{}) error {
	if wait == nil {
		return nil
	}
	select {
	case <-wait:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// capture takes the state, timers, de-duplication table and queue of a
// sealed h (its handler finished): the participant's part of the envelope
// and its state bytes. The queued requests are handed over to target (the
// owner id that alone may relay their replies).
func (h *hosted) capture(target string) (*pb.ParticipantState, []byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.timer != nil {
		h.timer.Stop()
		h.fireSet = false
	}
	var state []byte
	err := h.guard("Snapshot", func() (err error) { state, err = h.inst.Snapshot(); return err })
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot %s: %w", h.name, err)
	}
	var timers []byte
	if h.timers != nil {
		timers = h.timers.Encode()
	}
	ps := &pb.ParticipantState{
		Participant: &pb.Participant{Object: h.name, Type: h.typ.Name, ObjectGeneration: h.fence.ObjectGeneration,
			AuthorityGeneration: h.fence.AuthorityGeneration, StoreVersion: h.version},
		StateLength: uint64(len(state)), Timers: timers, Replies: h.replies.Encode(),
		Sessions: h.sessionJournalsLocked(), Outbox: h.outbox.Encode(),
	}
	h.noteStateBytes(len(state))
	var captured []*work
	for _, w := range h.queue {
		if w.timer || w.fn != nil {
			continue // timer state travels in Timers; missed ticks fire on the target
		}
		ps.Queued = append(ps.Queued, h.n.handOver(w, target))
		captured = append(captured, w)
	}
	if captured != nil || h.mv != nil {
		h.moving().captured = captured
		h.tidyLocked()
	}
	h.queue = nil
	return ps, state, nil
}

// snapshotLive takes h's state while it serves, between two handlers (on
// its mailbox: no handler runs during Snapshot): a pre-copy's base. The
// bytes are the instance's snapshot, never modified afterwards (the
// actor.Object contract), so they stay valid while h serves on.
func (h *hosted) snapshotLive(ctx context.Context) (*pb.ParticipantState, []byte, error) {
	var ps *pb.ParticipantState
	var state []byte
	var err error
	w := &work{done: make(chan *pb.CallReply, 1)}
	w.fn = func() {
		// On the mailbox: the handlers' state (instance, reply table,
		// timers) is still. The envelope is the one the seal will write
		// but for the queue: the sealed one is then about as long, and
		// its states start where the base's did (Seal.Start).
		if err = h.guard("Snapshot", func() (err error) { state, err = h.inst.Snapshot(); return err }); err != nil {
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.noteStateBytes(len(state))
		var timers []byte
		if h.timers != nil {
			timers = h.timers.Encode()
		}
		ps = &pb.ParticipantState{Participant: &pb.Participant{Object: h.name, Type: h.typ.Name, ObjectGeneration: h.fence.ObjectGeneration,
			AuthorityGeneration: h.fence.AuthorityGeneration, StoreVersion: h.version}, StateLength: uint64(len(state)),
			Timers: timers, Replies: h.replies.Encode(), Sessions: h.sessionJournalsLocked(), Outbox: h.outbox.Encode()}
	}
	if !h.submit(w) {
		return nil, nil, fmt.Errorf("snapshot %s: not serving", h.name)
	}
	select {
	case r := <-w.done:
		if r != nil { // closed before its turn
			return nil, nil, fmt.Errorf("snapshot %s: %s", h.name, r.GetMessage())
		}
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot %s: %w", h.name, err)
	}
	return ps, state, nil
}

// noteStateBytes records the size of h's state (h.mu held).
func (h *hosted) noteStateBytes(n int) { h.stateBytes = int32(min(n, 1<<30)) + 1 }

// knownStateBytes is the size of h's state as last seen (-1: unknown).
func (h *hosted) knownStateBytes() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return int(h.stateBytes) - 1
}

// hold ends the boundary: requests arriving from now on are held until
// the outcome; it returns those kept since the seal, in order.
func (h *hosted) hold() []*work {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mode = modeHold
	if h.mv == nil {
		return nil
	}
	return append([]*work(nil), h.mv.boundary...)
}

// reopen puts h back in service after an aborted relocation: captured, then
// boundary, then held requests, in the order they were accepted, under the
// fence of rec.
func (h *hosted) reopen(rec record.Snapshot) {
	n := h.n
	h.mu.Lock()
	var ws []*work
	if m := h.mv; m != nil {
		ws = append(append(append(ws, m.captured...), m.boundary...), m.held...)
		m.captured, m.boundary, m.held = nil, nil, nil
		h.tidyLocked()
	}
	h.mode = modeServing
	h.resetDeliveryLocked()
	h.takeRecordLocked(rec)
	h.queue = append(ws, h.queue...)
	start := len(h.queue) > 0 && !h.running && !h.closed
	if start {
		h.running = true
	}
	h.mu.Unlock()
	for _, w := range ws {
		n.unroute(w)
		w.route = 0
	}
	n.cache.Observe(rec)
	if start {
		h.startDrain()
	}
	h.arm()
	h.kickDelivery() // the outbox goes on from the first message
}

// drop discards the source's copy after the target committed (loc):
// captured and the first applied boundary requests wait for their relayed
// replies (or their callers' retries); the rest are redirected to the new
// owner.
func (h *hosted) drop(loc record.Location, applied int) {
	n := h.n
	n.cache.ObserveLocation(h.obj, loc)
	n.rememberMove(h.name, loc.Node.Address)
	n.unhost(h)
	h.mu.Lock()
	h.closed = true
	if h.timer != nil {
		h.timer.Stop()
	}
	var relayed, redirect []*work
	if m := h.mv; m != nil {
		relayed = append(relayed, m.captured...)
		for i, w := range m.boundary {
			if i < applied {
				relayed = append(relayed, w)
			} else {
				redirect = append(redirect, w)
			}
		}
		redirect = append(redirect, m.held...)
		m.captured, m.boundary, m.held = nil, nil, nil
		h.tidyLocked()
	}
	redirect = append(redirect, h.queue...)
	h.queue = nil
	h.mu.Unlock()
	hint := n.notOwnerAt(h.obj, loc)
	for _, w := range redirect {
		n.unroute(w)
		h.answer(w, hint)
	}
	// Relayed replies normally arrive within milliseconds; a caller whose
	// reply is lost is answered Unavailable after a bound and retries with
	// the same operation id (the target's table answers it).
	if len(relayed) > 0 {
		n.work.Go(func() {
			t := n.clock.NewTimer(n.cfg.RelayWait)
			defer t.Stop()
			select {
			case <-t.C():
			case <-n.stopping: // a stopping node answers at once
			}
			for _, w := range relayed {
				if pw := n.routes.take(w.route); pw != nil {
					h.answer(pw, &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE, Message: "reply of a relocated request was not relayed in time; retry with the same operation id"})
				}
			}
		})
	}
}

// failAll answers every pending request of h with code: the object was lost.
func (h *hosted) failAll(code pb.Code, msg string) {
	h.n.unhost(h)
	h.mu.Lock()
	h.closed = true
	var ws []*work
	if m := h.mv; m != nil {
		ws = append(append(append(ws, m.captured...), m.boundary...), m.held...)
		m.captured, m.boundary, m.held = nil, nil, nil
		h.tidyLocked()
	}
	ws = append(ws, h.queue...)
	h.queue = nil
	h.mu.Unlock()
	for _, w := range ws {
		h.n.unroute(w)
		h.answer(w, &pb.CallReply{Code: code, Message: msg})
	}
}

// admit opens a hidden h after its commit (snap): captured requests, then
// data, at the head of the mailbox (replies relayed), then requests that
// waited here; timers resume.
func (h *hosted) admit(snap authority.Snapshot, data []*pb.CallRequest, id wire.RelocationID) {
	n := h.n
	n.cache.Observe(snap)
	var ws []*work
	h.mu.Lock()
	if h.mv != nil {
		ws = append(ws, h.mv.captured...)
	}
	h.mu.Unlock()
	for _, q := range data {
		if q.GetObject() != h.name {
			continue
		}
		if op, err := wire.ValidateCall(q); err == nil {
			ws = append(ws, &work{req: q, op: op, relay: relayOf(q, id[:])})
		}
	}
	n.metrics.Replayed.Add(float64(len(ws)))
	h.mu.Lock()
	h.takeRecordLocked(snap)
	h.mode = modeServing
	h.unhideLocked()
	if m := h.mv; m != nil {
		ws = append(ws, m.waiting...)
		m.captured, m.waiting = nil, nil
		h.tidyLocked()
	}
	h.queue = append(ws, h.queue...)
	start := len(h.queue) > 0 && !h.running
	if start {
		h.running = true
	}
	h.mu.Unlock()
	n.metrics.Hosted.Inc()
	n.noteChange()
	if start {
		h.startDrain()
	}
	h.arm()
	h.kickDelivery() // the carried outbox, from the first message
}
