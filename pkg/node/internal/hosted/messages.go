package hosted

import (
	"fmt"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/tracing"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Messages between objects (docs/design.md §13), the sender's and the
// destination's side. What pkg/actor decides (actor.Outbox, actor.Delivery,
// actor.OutcomeOf), the node carries out:
//
//   - Recording. A handler's Send and Ask collect messages in its turn
//     (handlerCtx.sends, ids derived from the turn's operation id); when
//     the handler returns without error they enter the object's outbox in
//     the same turn (recordSends), before a durable object's persist —
//     which writes the outbox with the state, in the same fenced
//     transaction — and before the reply. A handler that fails records
//     none.
//   - Delivery (message_delivery.go) starts once the turn is over, only
//     while the object serves here: never while it is sealed for a move or
//     hidden on a target, and never from a copy that was dropped. A move
//     carries the outbox in the payload; the target delivers it again from
//     the first message (Delivery.Reset), the destination's reply table
//     answering what ran already.
//   - Answers are applied in a turn of the sender's own mailbox
//     (applyAnswers): the message leaves the outbox and, for an Ask, OnReply
//     runs, in one turn, persisted like a request's change for a durable
//     object. That turn is the only place a message leaves the outbox, so an
//     answer is applied once: an answer that arrives while the object is
//     sealed, or after it moved, is dropped, and the message is asked again
//     by whoever owns the object then.
//   - At the destination a message is a call with the message's operation
//     id (pkg/node route.go, host.go): executed once by its reply table, logged with
//     its sender, refused as stale when the sender was re-created since.

// outboxDelivery is the delivery bookkeeping of one hosted object (under
// h.Mu), allocated at its first message.
type outboxDelivery struct {
	d       actor.Delivery
	running bool   // a delivery goroutine runs (deliverLoop)
	kicked  bool   // ... and something changed since its last look
	epoch   uint64 // +1 at every Reset: answers of older sends are dropped
	timer   clock.Timer
}

// messagesLocked is h's delivery bookkeeping, made on first use (h.Mu held).
func (h *Object) messagesLocked() *outboxDelivery {
	if h.msgs == nil {
		h.msgs = &outboxDelivery{}
	}
	return h.msgs
}

func (c *handlerCtx) Send(to, method string, args ...[]byte) error {
	return c.send(to, method, args, false)
}

func (c *handlerCtx) Ask(to, method string, args ...[]byte) error {
	if _, ok := c.h.Inst.(actor.ReplyObject); !ok {
		return fmt.Errorf("%w: type %s does not implement OnReply", actor.ErrInvalidMessage, c.h.Typ.Name)
	}
	return c.send(to, method, args, true)
}

func (c *handlerCtx) send(to, method string, args [][]byte, ask bool) error {
	if c.op.IsZero() {
		return fmt.Errorf("%w: this turn has no operation id to derive the message's from", actor.ErrInvalidMessage)
	}
	if err := actor.ValidateMessage(to, method, args); err != nil {
		return err
	}
	m := actor.OutMessage{ID: actor.MessageID(c.op, uint32(len(c.sends))), To: to, Method: method, Args: args, Ask: ask}
	h, cfg := c.h, c.h.env.cfg
	h.Mu.Lock()
	fits := h.Outbox.Fits(append(c.sends[:len(c.sends):len(c.sends)], m), cfg.OutboxMessages, cfg.OutboxBytes)
	depth := h.Outbox.Len()
	h.Mu.Unlock()
	if !fits {
		h.env.metrics.Messages.Full.Inc()
		return fmt.Errorf("%w: %s holds %d messages (at most %d messages, %d bytes: --outbox-messages, --outbox-bytes), %d more in this turn",
			actor.ErrOutboxFull, h.name, depth, cfg.OutboxMessages, cfg.OutboxBytes, len(c.sends))
	}
	if h.traced != nil {
		m.Trace = tracing.Traceparent(h.traced) // its delivery continues this turn's trace
	}
	c.sends = append(c.sends, m)
	return nil
}

// RecordSends puts a turn's messages into h's outbox (on h's mailbox, the
// turn's handler returned without error). Send checked the bounds in the
// same turn, so the outbox has room.
func (h *Object) RecordSends(sends []actor.OutMessage) error {
	if len(sends) == 0 {
		return nil
	}
	h.Mu.Lock()
	if h.Outbox == nil {
		h.Outbox = &actor.Outbox{}
	}
	err := h.Outbox.Add(sends, h.env.cfg.OutboxMessages, h.env.cfg.OutboxBytes)
	h.Mu.Unlock()
	if err != nil {
		return err
	}
	h.env.metrics.Messages.Sent.Add(float64(len(sends)))
	h.env.outboxes.Note(h)
	return nil
}

// SetOutbox replaces h's outbox (a restore, a rollback) and forgets what
// its delivery was doing.
func (h *Object) SetOutbox(o *actor.Outbox) {
	h.Mu.Lock()
	h.Outbox = o
	h.resetDeliveryLocked()
	h.Mu.Unlock()
	if o.Len() > 0 {
		h.env.outboxes.Note(h)
	}
}

// messageAnswer is one settled message: its destination's answer (nil for
// a message given up on: Refused).
type messageAnswer struct {
	msg     actor.OutMessage
	reply   *pb.CallReply
	outcome actor.Outcome
}

// replyOf is what OnReply receives for a.
func (a messageAnswer) replyOf() actor.MessageReply {
	r := actor.MessageReply{ID: a.msg.ID, To: a.msg.To, Method: a.msg.Method, Args: a.msg.Args}
	switch {
	case a.outcome == actor.OutcomeRefused && (a.reply == nil || a.reply.GetCode() == pb.Code_CODE_OPERATION_EXPIRED):
		msg := "no answer within the de-duplication window"
		if a.reply != nil {
			msg = a.reply.GetMessage()
		}
		r.Err = fmt.Errorf("%w: %s to %s: %s", actor.ErrMessageExpired, a.msg.Method, a.msg.To, msg)
	case a.reply.GetCode() != pb.Code_CODE_OK:
		r.Err = wire.Errorf(a.reply.GetCode(), "%s", a.reply.GetMessage())
	default:
		r.Payload = a.reply.GetPayload()
	}
	return r
}

// ApplyAnswers is the sender's turn (on its mailbox) that takes settled
// messages out of the outbox, runs OnReply for each Ask, records what
// OnReply sent, and persists it all for a durable object. A message no
// longer in the outbox was applied already (or the outbox was rolled back
// meanwhile): nothing happens for it.
func (h *Object) ApplyAnswers(as []messageAnswer) {
	n := h.env
	if h.IsLost() {
		return
	}
	now := n.now()
	if st := n.leaseStatus(now); st != lease.Valid && st != lease.Unusable {
		h.forgetAnswers() // asked again if this node serves on; dropped with the object otherwise
		return
	}
	if h.Typ.Durable && h.EnsureDurable() != nil {
		h.forgetAnswers()
		return
	}
	ro, _ := h.Inst.(actor.ReplyObject)
	type ran struct{ op, msg wire.OperationID }
	var replies []ran
	applied, ended := 0, false
	for _, a := range as {
		h.Mu.Lock()
		_, ok := h.Outbox.Remove(a.msg.ID)
		if h.msgs != nil {
			h.msgs.d.Applied(a.msg.ID)
		}
		h.Mu.Unlock()
		if !ok {
			continue
		}
		applied++
		n.countAnswer(h, a, now)
		if !a.msg.Ask || ro == nil {
			continue
		}
		op := actor.ReplyOperationID(a.msg.ID)
		hc := &handlerCtx{h: h, now: now, op: op}
		if err := h.Guard("OnReply", func() error { return ro.OnReply(hc, a.replyOf()) }); err != nil {
			n.log.Warn().Str("object", h.name).Str("message", a.msg.ID.String()).Err(err).Msg("OnReply failed: its messages are not sent")
			hc.sends, hc.del = nil, false
		}
		ended = ended || hc.del
		if err := h.RecordSends(hc.sends); err != nil {
			n.log.Error().Str("object", h.name).Err(err).Msg("OnReply's messages could not be recorded")
		}
		if len(hc.pushes) > 0 {
			h.CommitPushes(nil, 0, hc.pushes)
		}
		replies = append(replies, ran{op: op, msg: a.msg.ID})
	}
	if applied == 0 {
		return
	}
	if h.Typ.Durable {
		if r := h.persistChange(nil, actor.Reply{}, now); r != nil {
			// Rolled back to what etcd holds, or dropped: the messages
			// are still in the persisted outbox and are asked again.
			n.log.Warn().Str("object", h.name).Str("code", wire.CodeName(r.GetCode())).Str("message", r.GetMessage()).Msg("applied answers of messages not persisted")
			return
		}
	}
	if n.xlog != nil {
		f := h.CurrentFence()
		for _, r := range replies {
			n.xlog.OnReply(h.name, f, r.op, r.msg, now)
		}
	}
	if ended && h.end() == nil { // deleted (OnReply's turn has no caller to tell otherwise)
		return
	}
	h.KickDelivery()
}

// forgetAnswers makes the delivery forget what it sent and heard (the
// messages go again).
func (h *Object) forgetAnswers() {
	h.Mu.Lock()
	h.resetDeliveryLocked()
	h.Mu.Unlock()
	h.KickDelivery()
}

// giveUpAfter is how old an unanswered message may get before its sender
// stops asking: twice the de-duplication window (rule 3 of actor.Delivery).
func (n *Env) giveUpAfter() time.Duration { return 2 * n.cfg.DedupWindow }
