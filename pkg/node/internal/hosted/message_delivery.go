package hosted

import (
	"sync"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/lease"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Delivery of an object's outbox (messages.go). One goroutine per object
// at most (outboxDelivery.running: deliverOutbox), one of the node's work (waited for at
// Stop), started by kickDelivery when something may be sendable — a turn
// recorded messages, an answer was applied, the object was admitted,
// reopened or re-activated, a retry came due — and ending once nothing is
// (a retry arms a timer that kicks it again). It asks actor.Delivery what
// to send, sends those side by side, and tells it what came back; it
// changes the outbox itself never: answers go to the object's mailbox
// (applyAnswers).
//
// The race that matters: a seal, a reopen or a restore resets the delivery
// (epoch+1) while a send is in flight. Its answer is then dropped, never
// applied under the new epoch — the same rule as a session delivery's count,
// which counts only under the binding it was sent for — so nothing that
// reached the copy before the move is applied after it; the message is
// asked again, and its destination answers from its reply table.

// messageParallel bounds the destinations one object sends to at a time.
const messageParallel = 16

// deliverableLocked reports whether h may deliver its outbox now (h.Mu
// held): it serves here, and has messages.
func (h *Object) deliverableLocked() bool {
	return !h.Closed && !h.Lost && h.Mode == ModeServing && h.Outbox.Len() > 0
}

// KickDelivery starts h's delivery goroutine, or tells the running one to
// look again.
func (h *Object) KickDelivery() {
	h.Mu.Lock()
	if !h.deliverableLocked() {
		h.Mu.Unlock()
		return
	}
	md := h.messagesLocked()
	if md.running {
		md.kicked = true
		h.Mu.Unlock()
		return
	}
	md.running = true
	h.Mu.Unlock()
	h.env.work.Go(h.deliverOutbox)
}

// resetDeliveryLocked forgets the sends in flight and the answers not yet
// applied (h.Mu held): a seal, a reopen, a restore, a rollback.
func (h *Object) resetDeliveryLocked() {
	md := h.msgs
	if md == nil {
		return
	}
	md.d.Reset()
	md.epoch++
	if md.timer != nil {
		md.timer.Stop()
		md.timer = nil
	}
}

// stopDeliveryLocked stops h's retry timer (h.Mu held; h closes).
func (h *Object) stopDeliveryLocked() {
	if md := h.msgs; md != nil && md.timer != nil {
		md.timer.Stop()
		md.timer = nil
	}
}

func (h *Object) deliverOutbox() {
	n := h.env
	for {
		h.Mu.Lock()
		md := h.msgs
		if !h.deliverableLocked() {
			md.running = false
			h.Mu.Unlock()
			return
		}
		now := n.now()
		if st := n.leaseStatus(now); st != lease.Valid {
			// An owner that cannot confirm its lease sends nothing under
			// its fence; it looks again soon (or is fenced and drops h).
			md.running = false
			h.armDeliveryLocked(now.Add(100 * time.Millisecond))
			h.Mu.Unlock()
			return
		}
		md.kicked = false
		send, expired, wake := md.d.Next(h.Outbox, now, messageParallel, n.giveUpAfter())
		epoch := md.epoch
		from := &pb.MessageSender{Object: h.name, Fence: n.wireFence(h.Fence, h.Version, n.selfNode.RoutingID)}
		h.Mu.Unlock()

		var answers []messageAnswer
		for _, m := range expired {
			answers = append(answers, messageAnswer{msg: m, outcome: actor.OutcomeRefused})
		}
		if len(send) == 0 && len(answers) == 0 {
			h.Mu.Lock()
			if md.kicked && h.deliverableLocked() {
				h.Mu.Unlock()
				continue
			}
			md.running = false
			if !wake.IsZero() {
				h.armDeliveryLocked(wake)
			}
			h.Mu.Unlock()
			return
		}
		replies := h.sendAll(send, from)
		h.Mu.Lock()
		if md.epoch != epoch {
			h.Mu.Unlock() // reset meanwhile: these answers belong to a copy that is gone
			continue
		}
		now = n.now()
		for i, m := range send {
			out := md.d.Result(m.ID, replies[i].GetCode(), now)
			if out == actor.OutcomeRetry {
				n.metrics.Messages.Retried.Inc()
				continue
			}
			answers = append(answers, messageAnswer{msg: m, reply: replies[i], outcome: out})
		}
		h.Mu.Unlock()
		if len(answers) > 0 {
			// Refused (not serving any more): the seal reset the delivery,
			// the messages go again from the next owner.
			h.Submit(&Work{Fn: func() { h.ApplyAnswers(answers) }})
		}
	}
}

// armDeliveryLocked kicks the delivery at at (h.Mu held).
func (h *Object) armDeliveryLocked(at time.Time) {
	md := h.messagesLocked()
	if md.timer != nil {
		md.timer.Stop()
	}
	md.timer = h.env.clock.AfterFunc(max(at.Sub(h.env.now()), 0), h.KickDelivery)
}

// sendAll sends msgs side by side and returns their replies in order.
func (h *Object) sendAll(msgs []actor.OutMessage, from *pb.MessageSender) []*pb.CallReply {
	out := make([]*pb.CallReply, len(msgs))
	send := h.env.node.SendMessage
	if len(msgs) == 1 {
		out[0] = send(msgs[0], from)
		return out
	}
	var wg sync.WaitGroup
	for i, m := range msgs {
		wg.Go(func() { out[i] = send(m, from) })
	}
	wg.Wait()
	return out
}
