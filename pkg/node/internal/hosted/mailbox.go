package hosted

import (
	"context"
	"fmt"
	"time"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// A hosted object's mailbox through a relocation: the methods below are
// the only code that moves work between its queues (queue, captured,
// boundary, held, waiting), each one what a relocation action asks for
// (mailbox_source.go, mailbox_target.go carry the actions out).

// SealStart stops dispatch: requests arriving from now on are kept as the
// boundary. It returns a channel closed once the handler in progress (if
// any) finished, or nil when none runs.
func (h *Object) SealStart() chan struct{} {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	h.Mode = ModeBoundary
	h.resetDeliveryLocked() // answers of sends in flight are dropped (message_delivery.go)
	if h.Running {
		m := h.MovingLocked()
		if m.SealWait == nil {
			m.SealWait = make(chan struct{})
		}
		return m.SealWait
	}
	return nil
}

func WaitSealed(ctx context.Context, wait chan struct{}) error {
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

// Capture takes the state, timers, de-duplication table and queue of a
// sealed h (its handler finished): the participant's part of the envelope
// and its state bytes. The queued requests are handed over to target (the
// owner id that alone may relay their replies).
func (h *Object) Capture(target string) (*pb.ParticipantState, []byte, error) {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	if h.timer != nil {
		h.timer.Stop()
		h.fireSet = false
	}
	var state []byte
	err := h.Guard("Snapshot", func() (err error) { state, err = h.Inst.Snapshot(); return err })
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot %s: %w", h.name, err)
	}
	var timers []byte
	if h.Timers != nil {
		timers = h.Timers.Encode()
	}
	ps := &pb.ParticipantState{
		Participant: &pb.Participant{Object: h.name, Type: h.Typ.Name, ObjectGeneration: h.Fence.ObjectGeneration,
			AuthorityGeneration: h.Fence.AuthorityGeneration, StoreVersion: h.Version},
		StateLength: uint64(len(state)), Timers: timers, Replies: h.Replies.Encode(),
		Sessions: h.SessionJournalsLocked(), Outbox: h.Outbox.Encode(),
	}
	h.NoteStateBytes(len(state))
	var captured []*Work
	for _, w := range h.Queue {
		if w.Timer || w.Fn != nil {
			continue // timer state travels in Timers; missed ticks fire on the target
		}
		ps.Queued = append(ps.Queued, h.env.handOver(w, target))
		captured = append(captured, w)
	}
	if captured != nil || h.Mv != nil {
		h.MovingLocked().Captured = captured
		h.TidyLocked()
	}
	h.Queue = nil
	return ps, state, nil
}

// SnapshotLive takes h's state while it serves, between two handlers (on
// its mailbox: no handler runs during Snapshot): a pre-copy's base. The
// bytes are the instance's snapshot, never modified afterwards (the
// actor.Object contract), so they stay valid while h serves on.
func (h *Object) SnapshotLive(ctx context.Context) (*pb.ParticipantState, []byte, error) {
	var ps *pb.ParticipantState
	var state []byte
	var err error
	w := &Work{Done: make(chan *pb.CallReply, 1)}
	w.Fn = func() {
		// On the mailbox: the handlers' state (instance, reply table,
		// timers) is still. The envelope is the one the seal will write
		// but for the queue: the sealed one is then about as long, and
		// its states start where the base's did (Seal.Start).
		if err = h.Guard("Snapshot", func() (err error) { state, err = h.Inst.Snapshot(); return err }); err != nil {
			return
		}
		h.Mu.Lock()
		defer h.Mu.Unlock()
		h.NoteStateBytes(len(state))
		var timers []byte
		if h.Timers != nil {
			timers = h.Timers.Encode()
		}
		ps = &pb.ParticipantState{Participant: &pb.Participant{Object: h.name, Type: h.Typ.Name, ObjectGeneration: h.Fence.ObjectGeneration,
			AuthorityGeneration: h.Fence.AuthorityGeneration, StoreVersion: h.Version}, StateLength: uint64(len(state)),
			Timers: timers, Replies: h.Replies.Encode(), Sessions: h.SessionJournalsLocked(), Outbox: h.Outbox.Encode()}
	}
	if !h.Submit(w) {
		return nil, nil, fmt.Errorf("snapshot %s: not serving", h.name)
	}
	select {
	case r := <-w.Done:
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

// NoteStateBytes records the size of h's state (h.Mu held).
func (h *Object) NoteStateBytes(n int) { h.stateBytes = int32(min(n, 1<<30)) + 1 }

// KnownStateBytes is the size of h's state as last seen (-1: unknown).
func (h *Object) KnownStateBytes() int {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	return int(h.stateBytes) - 1
}

// Hold ends the boundary: requests arriving from now on are held until
// the outcome; it returns those kept since the seal, in order.
func (h *Object) Hold() []*Work {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	h.Mode = ModeHold
	if h.Mv == nil {
		return nil
	}
	return append([]*Work(nil), h.Mv.Boundary...)
}

// Reopen puts h back in service after an aborted relocation: captured, then
// boundary, then held requests, in the order they were accepted, under the
// fence of rec.
func (h *Object) Reopen(rec record.Snapshot) {
	n := h.env
	h.Mu.Lock()
	var ws []*Work
	if m := h.Mv; m != nil {
		ws = append(append(append(ws, m.Captured...), m.Boundary...), m.Held...)
		m.Captured, m.Boundary, m.Held = nil, nil, nil
		h.TidyLocked()
	}
	h.Mode = ModeServing
	h.resetDeliveryLocked()
	h.TakeRecordLocked(rec)
	h.Queue = append(ws, h.Queue...)
	start := len(h.Queue) > 0 && !h.Running && !h.Closed
	if start {
		h.Running = true
	}
	h.Mu.Unlock()
	for _, w := range ws {
		n.unroute(w)
		w.Route = 0
	}
	n.cache.Observe(rec)
	if start {
		h.StartDrain()
	}
	h.Arm()
	h.KickDelivery() // the outbox goes on from the first message
}

// Drop discards the source's copy after the target committed (loc):
// captured and the first applied boundary requests wait for their relayed
// replies (or their callers' retries); the rest are redirected to the new
// owner.
func (h *Object) Drop(loc record.Location, applied int) {
	n := h.env
	n.cache.ObserveLocation(h.obj, loc)
	n.rememberMove(h.name, loc.Node.Address)
	n.unhost(h)
	h.Mu.Lock()
	h.Closed = true
	if h.timer != nil {
		h.timer.Stop()
	}
	var relayed, redirect []*Work
	if m := h.Mv; m != nil {
		relayed = append(relayed, m.Captured...)
		for i, w := range m.Boundary {
			if i < applied {
				relayed = append(relayed, w)
			} else {
				redirect = append(redirect, w)
			}
		}
		redirect = append(redirect, m.Held...)
		m.Captured, m.Boundary, m.Held = nil, nil, nil
		h.TidyLocked()
	}
	redirect = append(redirect, h.Queue...)
	h.Queue = nil
	h.Mu.Unlock()
	hint := n.notOwnerAt(h.obj, loc)
	for _, w := range redirect {
		n.unroute(w)
		h.Answer(w, hint)
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
				if pw := n.node.TakeRoute(w.Route); pw != nil {
					h.Answer(pw, &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE, Message: "reply of a relocated request was not relayed in time; retry with the same operation id"})
				}
			}
		})
	}
}

// FailAll answers every pending request of h with code: the object was lost.
func (h *Object) FailAll(code pb.Code, msg string) {
	h.env.unhost(h)
	h.Mu.Lock()
	h.Closed = true
	var ws []*Work
	if m := h.Mv; m != nil {
		ws = append(append(append(ws, m.Captured...), m.Boundary...), m.Held...)
		m.Captured, m.Boundary, m.Held = nil, nil, nil
		h.TidyLocked()
	}
	ws = append(ws, h.Queue...)
	h.Queue = nil
	h.Mu.Unlock()
	for _, w := range ws {
		h.env.unroute(w)
		h.Answer(w, &pb.CallReply{Code: code, Message: msg})
	}
}

// Admit opens a hidden h after its commit (snap): captured requests, then
// data, at the head of the mailbox (replies relayed), then requests that
// waited here; timers resume.
func (h *Object) Admit(snap authority.Snapshot, data []*pb.CallRequest, id wire.RelocationID) {
	n := h.env
	n.cache.Observe(snap)
	var ws []*Work
	h.Mu.Lock()
	if h.Mv != nil {
		ws = append(ws, h.Mv.Captured...)
	}
	h.Mu.Unlock()
	for _, q := range data {
		if q.GetObject() != h.name {
			continue
		}
		if op, err := wire.ValidateCall(q); err == nil {
			ws = append(ws, &Work{Req: q, Op: op, Relay: RelayOf(q, id[:])})
		}
	}
	n.metrics.Replayed.Add(float64(len(ws)))
	h.Used(n.now()) // idle from its arrival
	h.Mu.Lock()
	h.TakeRecordLocked(snap)
	h.Mode = ModeServing
	h.UnhideLocked()
	if m := h.Mv; m != nil {
		ws = append(ws, m.Waiting...)
		m.Captured, m.Waiting = nil, nil
		h.TidyLocked()
	}
	h.Queue = append(ws, h.Queue...)
	start := len(h.Queue) > 0 && !h.Running
	if start {
		h.Running = true
	}
	h.Mu.Unlock()
	n.metrics.Hosted.Inc()
	n.noteChange()
	if start {
		h.StartDrain()
	}
	h.Arm()
	h.KickDelivery() // the carried outbox, from the first message
}

// admitWait bounds how long a relocation waits for an object that just
// arrived here to be admitted (moments after the commit that the previous
// relocation waited for).
const admitWait = 2 * time.Second

// WaitAdmitted waits, at most admitWait, until h is activated and, if it
// just arrived here, admitted by its target stage.
func (h *Object) WaitAdmitted(ctx context.Context, clk clock.Clock) error {
	select {
	case <-h.ReadyCh():
	case <-ctx.Done():
		return ctx.Err()
	}
	var unhidden chan struct{}
	h.Mu.Lock()
	if h.Mv != nil {
		unhidden = h.Mv.Unhidden
	}
	h.Mu.Unlock()
	if unhidden == nil {
		return nil
	}
	t := clk.NewTimer(admitWait)
	defer t.Stop()
	select {
	case <-unhidden:
	case <-t.C():
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}
