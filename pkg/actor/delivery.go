package actor

import (
	"time"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Delivery decides how an Outbox is delivered; the runtime carries its
// decisions out and tells it what came back. It is plain data with explicit
// now arguments, like Timers and the relocation machines, and holds only
// what a delivery in progress needs (sends in flight, answers not yet
// applied, retry times): it does not travel with the object. A moved,
// reopened or reloaded object starts with a fresh Delivery (Reset), and so
// sends its outbox's messages again from the first: a destination that
// executed one already answers from its ReplyTable.
//
// The rules:
//
//  1. In order per destination: only the first message of the outbox to
//     a destination is ever sent; the next one to it goes once the first
//     was answered and its answer applied (taken out of the outbox, in a
//     turn of the sender's mailbox: Applied). Messages to different
//     destinations go side by side.
//  2. What an answer means is Outcome (OutcomeOf: one table): Answered —
//     the destination executed it, or refused it for good (it will never
//     run): done, delivered; Refused — the destination refuses it as
//     expired (or its id as invalid): done, never sent again; Retry — it
//     did not run (no owner reachable, moving, not the owner, shutting
//     down, its state lost and re-created): sent again after a backoff,
//     with the same id.
//  3. A message whose id is older than the give-up age (twice the window,
//     say) and still unanswered is Refused without sending it again: its
//     destination would refuse it as expired anyway.
//
// Not safe for concurrent use.
type Delivery struct {
	m map[wire.OperationID]*sending
}

type sending struct {
	inFlight  bool
	settled   bool // answered; waits for the sender's turn that applies it
	attempts  uint32
	notBefore int64 // Unix ms: the next attempt no earlier
}

// Outcome is what an answer means for a message.
type Outcome int

const (
	// OutcomeRetry: not executed; send it again later, same id.
	OutcomeRetry Outcome = 1 + iota
	// OutcomeAnswered: executed (OK or an application error), or refused
	// for good before it ran: done.
	OutcomeAnswered
	// OutcomeRefused: refused as expired (or its id as invalid): done,
	// not executed now, never again.
	OutcomeRefused
)

func (o Outcome) String() string {
	switch o {
	case OutcomeRetry:
		return "retry"
	case OutcomeAnswered:
		return "answered"
	case OutcomeRefused:
		return "refused"
	}
	return "Outcome(?)"
}

// OutcomeOf is the outcome of a message whose delivery attempt got code:
// the one table of what an answer means to a sender.
func OutcomeOf(c pb.Code) Outcome {
	switch c {
	case pb.Code_CODE_OPERATION_EXPIRED, pb.Code_CODE_INVALID_OPERATION_ID:
		return OutcomeRefused
	case pb.Code_CODE_UNSPECIFIED, pb.Code_CODE_NOT_OWNER, pb.Code_CODE_RELOCATING, pb.Code_CODE_UNAVAILABLE,
		pb.Code_CODE_SHUTTING_DOWN, pb.Code_CODE_STALE_FENCE, pb.Code_CODE_DEADLINE_EXCEEDED,
		pb.Code_CODE_STATE_LOST, pb.Code_CODE_RESOURCE_EXHAUSTED, pb.Code_CODE_DATA_LOST,
		// The destination's type may be on nodes that are (re)starting.
		pb.Code_CODE_UNKNOWN_TYPE:
		return OutcomeRetry
	}
	return OutcomeAnswered
}

// Backoff bounds of a retried message.
const (
	MessageBackoffMin = 10 * time.Millisecond
	MessageBackoffMax = time.Second
)

// backoff is the wait before attempt attempts+1: doubling from the minimum.
func backoff(attempts uint32) time.Duration {
	d := MessageBackoffMin
	for i := uint32(1); i < attempts && d < MessageBackoffMax; i++ {
		d *= 2
	}
	return min(d, MessageBackoffMax)
}

func (d *Delivery) of(id wire.OperationID) *sending {
	if d.m == nil {
		d.m = map[wire.OperationID]*sending{}
	}
	s := d.m[id]
	if s == nil {
		s = &sending{}
		d.m[id] = s
	}
	return s
}

// Next says what to send now (rule 1): the first message of the outbox to
// each destination, unless it is in flight, answered and not yet applied,
// or waiting for its retry time; at most max in flight at once (max ≤ 0:
// no bound). They are in flight from now until Result. Messages older than giveUp
// (rule 3; 0: never) come back in expired instead, settled as Refused:
// the caller applies them like an answer. wake is the earliest retry time
// of a message that waits (zero: none), when Next has more to say.
func (d *Delivery) Next(o *Outbox, now time.Time, max int, giveUp time.Duration) (send, expired []OutMessage, wake time.Time) {
	nowMs := now.UnixMilli()
	var wakeMs int64
	inFlight := 0
	for _, s := range d.m {
		if s.inFlight {
			inFlight++
		}
	}
	seen := map[string]bool{}
	for _, m := range o.Entries() {
		if seen[m.To] {
			continue
		}
		seen[m.To] = true
		s := d.of(m.ID)
		switch {
		case s.inFlight || s.settled:
			continue
		case giveUp > 0 && idMs(m.ID) < nowMs-giveUp.Milliseconds():
			s.settled = true
			expired = append(expired, m)
			continue
		case s.notBefore > nowMs:
			if wakeMs == 0 || s.notBefore < wakeMs {
				wakeMs = s.notBefore
			}
			continue
		case max > 0 && inFlight >= max:
			continue
		}
		inFlight++
		s.inFlight = true
		s.attempts++
		send = append(send, m)
	}
	if wakeMs != 0 {
		wake = msTime(wakeMs)
	}
	return send, expired, wake
}

// Result takes the answer code of one send of message id (that Next gave)
// and returns its outcome (rule 2): Retry (it waits its backoff, from
// now), or Answered and Refused, which settle it until Applied.
func (d *Delivery) Result(id wire.OperationID, c pb.Code, now time.Time) Outcome {
	s := d.of(id)
	s.inFlight = false
	out := OutcomeOf(c)
	if out == OutcomeRetry {
		s.notBefore = now.Add(backoff(s.attempts)).UnixMilli()
		return out
	}
	s.settled = true
	return out
}

// Applied forgets message id: the sender's turn took its answer (and the
// message out of the outbox).
func (d *Delivery) Applied(id wire.OperationID) { delete(d.m, id) }

// Reset forgets everything: nothing is in flight or answered any more (the
// object was sealed for a move, reopened, or restored). The answers of
// sends still in flight must then be dropped by the caller.
func (d *Delivery) Reset() { d.m = nil }

// Attempts is how often message id was sent since the last Reset.
func (d *Delivery) Attempts(id wire.OperationID) uint32 {
	if s := d.m[id]; s != nil {
		return s.attempts
	}
	return 0
}
