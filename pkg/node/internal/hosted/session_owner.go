package hosted

import (
	"fmt"
	"time"

	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/session"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The object owner's side of sessions: each hosted object keeps the
// journal of every session bound to it (pkg/session), executes a session's
// calls in order, and delivers its pushes to the session's gateway. The
// journals move with the object (mailbox.go): sealed before the capture,
// routed after the commit.

// BoundSession is one session's journal at its object's owner, and the
// state of its delivery.
type BoundSession struct {
	J          *session.Journal
	Sealed     bool   // the object moves: nothing is delivered
	delivering bool   // a delivery goroutine runs
	kicked     bool   // ... and something happened since it read the journal
	GwHas      uint64 // the highest push the gateway said it holds
}

// Delivery bounds.
const (
	deliverBatch    = 64
	deliverAttempts = 5
	deliverBackoff  = 50 * time.Millisecond
	DeliverTimeout  = 2 * time.Second
)

// sessionOf checks a session call against the object's journal (h.Mu
// held): the ref must be the binding the journal has, and the seq the next
// one. It answers the refusal, or nil.
func (h *Object) sessionOfLocked(rs *pb.SessionRef, seq uint64) (*BoundSession, *pb.CallReply) {
	ref, err := session.RefOf(rs)
	if err != nil {
		return nil, &pb.CallReply{Code: pb.Code_CODE_PROTOCOL_ERROR, Message: err.Error()}
	}
	s := h.Sessions[ref.Session]
	if s == nil || !s.J.Gateway.SameGateway(ref) || s.J.Gateway.Binding != ref.Binding {
		// Another gateway (or a later bind) holds it: no fence, so the
		// gateway does not take this for a superseded owner.
		r := &pb.CallReply{Code: pb.Code_CODE_STALE_FENCE, Message: fmt.Sprintf("session %s is not bound here with binding %d", ref.Session, ref.Binding)}
		if s != nil && s.J.Gateway.SameGateway(ref) && s.J.Gateway.Binding > ref.Binding {
			// This gateway's own newer binding (a route on its way, or one
			// it refused): the hint says bind again here, not "another
			// gateway holds it".
			r.Message = fmt.Sprintf("session %s is bound here with a newer binding %d, not %d", ref.Session, s.J.Gateway.Binding, ref.Binding)
			r.Hint = &pb.Location{Address: h.env.selfNode.Address}
		}
		return nil, r
	}
	retry, err := s.J.Call(seq)
	switch {
	case err != nil:
		return nil, &pb.CallReply{Code: wire.CodeOf(err), Message: err.Error()}
	case retry:
		// An earlier call whose reply is no longer in the table.
		return nil, &pb.CallReply{Code: pb.Code_CODE_ALREADY_TERMINAL, Message: fmt.Sprintf("session call %d ran already (the last is %d)", seq, s.J.LastCall)}
	}
	return s, nil
}

// CommitPushes records what a session call and its pushes did, once the
// call is recorded (h.Mu not held): the call's seq, then each push in the
// journals; a session whose client falls behind its backlog bound is
// unbound (its gateway is told stale: the client opens a new session).
func (h *Object) CommitPushes(s *BoundSession, seq uint64, pushes []pendingPush) {
	h.Mu.Lock()
	if s != nil {
		s.J.Executed(seq)
	}
	var kick []*BoundSession
	for _, p := range pushes {
		targets := []*BoundSession{p.to}
		if p.to == nil {
			targets = targets[:0]
			for _, b := range h.Sessions {
				targets = append(targets, b)
			}
		}
		for _, b := range targets {
			if h.Sessions[b.J.Gateway.Session] != b {
				continue // unbound meanwhile
			}
			if _, err := b.J.Push(p.payload, p.trace); err != nil {
				delete(h.Sessions, b.J.Gateway.Session)
				h.env.metrics.SessionsDropped.Inc()
				continue
			}
			kick = append(kick, b)
		}
	}
	h.Mu.Unlock()
	for _, b := range kick {
		h.Deliver(b)
	}
}

// pendingPush is a push a handler made, recorded once its call is.
type pendingPush struct {
	to      *BoundSession // nil: every session (Publish)
	payload []byte
	trace   string // the turn's traceparent ("": not traced)
}

// Deliver starts the delivery of b's pending pushes unless the object
// moves or nothing is pending: a goroutine of the node's that ends once the
// gateway holds everything. When one runs already it is kicked: it looks
// again before it ends (a push or a new binding may have come after its
// last look, and a kick dropped there would leave pushes undelivered).
func (h *Object) Deliver(b *BoundSession) {
	h.Mu.Lock()
	if b.delivering {
		b.kicked = true
		h.Mu.Unlock()
		return
	}
	if b.Sealed || h.Closed || len(b.J.After(b.GwHas)) == 0 {
		h.Mu.Unlock()
		return
	}
	b.delivering = true
	h.Mu.Unlock()
	h.env.work.Go(func() { h.deliverLoop(b) })
}

func (h *Object) deliverLoop(b *BoundSession) {
	for {
		h.deliverPending(b)
		h.Mu.Lock()
		again := b.kicked && !b.Sealed && !h.Closed && h.Sessions[b.J.Gateway.Session] == b
		b.kicked, b.delivering = false, again
		h.Mu.Unlock()
		if !again {
			return
		}
	}
}

// deliverPending sends b's pending pushes to its gateway until it holds
// them all, the gateway refuses the binding, or it stays out of reach.
func (h *Object) deliverPending(b *BoundSession) {
	n := h.env
	for failures := 0; failures < deliverAttempts; {
		h.Mu.Lock()
		if b.Sealed || h.Closed || h.Sessions[b.J.Gateway.Session] != b {
			h.Mu.Unlock()
			return
		}
		b.kicked = false // this look sees everything before it
		pushes := b.J.After(b.GwHas)
		if len(pushes) > deliverBatch {
			pushes = pushes[:deliverBatch]
		}
		ref, fence := b.J.Gateway, n.wireFence(h.Fence, h.Version, n.rid.Hex())
		h.Mu.Unlock()
		if len(pushes) == 0 {
			return
		}
		m := &pb.SessionDelivery{Object: h.name, Fence: fence, Session: ref.Proto()}
		for _, p := range pushes {
			m.Pushes = append(m.Pushes, p.Proto())
		}
		r, err := n.node.DeliverPushes(ref, m)
		switch {
		case err == nil && r.GetCode() == pb.Code_CODE_OK:
			failures = 0
			h.Mu.Lock()
			if b.J.Gateway == ref {
				// Only the binding it was sent under: a bind since (a
				// resume) reset GwHas to what the client has, and an
				// older gateway's count would hide those pushes from the
				// new one.
				b.GwHas = max(b.GwHas, r.GetDelivered())
			}
			h.Mu.Unlock()
			n.metrics.SessionPushes.Add(float64(len(pushes)))
			continue
		case err == nil && (r.GetCode() == pb.Code_CODE_STALE_FENCE || r.GetCode() == pb.Code_CODE_NOT_FOUND):
			// The gateway holds another binding (or has not taken this
			// one yet: its ack of it kicks the delivery), or none.
			return
		}
		failures++
		if !clock.Sleep(n.clock, time.Duration(failures)*deliverBackoff, n.life.Done()) {
			return
		}
	}
}

// SessionJournalsLocked is the sessions' part of the capture (h.Mu held).
func (h *Object) SessionJournalsLocked() []*pb.SessionJournal {
	out := make([]*pb.SessionJournal, 0, len(h.Sessions))
	for _, b := range h.Sessions {
		out = append(out, b.J.Proto())
	}
	return out
}

// RestoreSessions takes the journals of a payload into a hidden instance,
// sealed until its admission.
func (h *Object) RestoreSessions(js []*pb.SessionJournal) error {
	for _, m := range js {
		j, err := session.JournalOf(m)
		if err != nil {
			return err
		}
		if h.Sessions == nil {
			h.Sessions = map[session.ID]*BoundSession{}
		}
		h.Sessions[j.Gateway.Session] = &BoundSession{J: j, Sealed: true, GwHas: j.AckedPush}
	}
	return nil
}

// RouteSessions binds every session of h anew (h's owner now: the target
// after a commit, the source after an abort) and tells its gateway, on
// goroutines of the node's; then deliveries resume.
func (h *Object) RouteSessions(relocationID []byte, commit bool) {
	n := h.env
	h.Mu.Lock()
	type route struct {
		b   *BoundSession
		req *pb.SessionRouteRequest
	}
	var routes []route
	fence := n.wireFence(h.Fence, h.Version, n.rid.Hex())
	for _, b := range h.Sessions {
		b.J.Rebind()
		b.Sealed = false
		routes = append(routes, route{b, &pb.SessionRouteRequest{RelocationId: relocationID, Object: h.name, Commit: commit,
			Fence: fence, Address: n.selfNode.Address, Session: b.J.Gateway.Proto()}})
	}
	h.Mu.Unlock()
	for _, r := range routes {
		n.work.Go(func() {
			code := n.node.SessionRoute(r.b.J.Gateway, r.req)
			n.metrics.SessionsRouted.WithLabelValues(wire.CodeName(code)).Inc()
			if code == pb.Code_CODE_OK {
				h.Deliver(r.b)
			}
		})
	}
}
