package node

import (
	"context"
	"fmt"
	"time"

	"github.com/meshloc/meshloc/pkg/mtls"

	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/session"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The object owner's side of sessions: each hosted object keeps the
// journal of every session bound to it (pkg/session), executes a session's
// calls in order, and delivers its pushes to the session's gateway. The
// journals move with the object (mailbox.go): sealed before the capture,
// routed after the commit.

// boundSession is one session's journal at its object's owner, and the
// state of its delivery.
type boundSession struct {
	j          *session.Journal
	sealed     bool   // the object moves: nothing is delivered
	delivering bool   // a delivery goroutine runs
	kicked     bool   // ... and something happened since it read the journal
	gwHas      uint64 // the highest push the gateway said it holds
}

// Delivery bounds.
const (
	deliverBatch    = 64
	deliverAttempts = 5
	deliverBackoff  = 50 * time.Millisecond
	deliverTimeout  = 2 * time.Second
)

// sessionOf checks a session call against the object's journal (h.mu
// held): the ref must be the binding the journal has, and the seq the next
// one. It answers the refusal, or nil.
func (h *hosted) sessionOfLocked(rs *pb.SessionRef, seq uint64) (*boundSession, *pb.CallReply) {
	ref, err := session.RefOf(rs)
	if err != nil {
		return nil, &pb.CallReply{Code: pb.Code_CODE_PROTOCOL_ERROR, Message: err.Error()}
	}
	s := h.sessions[ref.Session]
	if s == nil || !s.j.Gateway.SameGateway(ref) || s.j.Gateway.Binding != ref.Binding {
		// Another gateway (or a later bind) holds it: no fence, so the
		// gateway does not take this for a superseded owner.
		r := &pb.CallReply{Code: pb.Code_CODE_STALE_FENCE, Message: fmt.Sprintf("session %s is not bound here with binding %d", ref.Session, ref.Binding)}
		if s != nil && s.j.Gateway.SameGateway(ref) && s.j.Gateway.Binding > ref.Binding {
			// This gateway's own newer binding (a route on its way, or one
			// it refused): the hint says bind again here, not "another
			// gateway holds it".
			r.Message = fmt.Sprintf("session %s is bound here with a newer binding %d, not %d", ref.Session, s.j.Gateway.Binding, ref.Binding)
			r.Hint = &pb.Location{Address: h.n.selfNode.Address}
		}
		return nil, r
	}
	retry, err := s.j.Call(seq)
	switch {
	case err != nil:
		return nil, &pb.CallReply{Code: wire.CodeOf(err), Message: err.Error()}
	case retry:
		// An earlier call whose reply is no longer in the table.
		return nil, &pb.CallReply{Code: pb.Code_CODE_ALREADY_TERMINAL, Message: fmt.Sprintf("session call %d ran already (the last is %d)", seq, s.j.LastCall)}
	}
	return s, nil
}

// commitPushes records what a session call and its pushes did, once the
// call is recorded (h.mu not held): the call's seq, then each push in the
// journals; a session whose client falls behind its backlog bound is
// unbound (its gateway is told stale: the client opens a new session).
func (h *hosted) commitPushes(s *boundSession, seq uint64, pushes []pendingPush) {
	h.mu.Lock()
	if s != nil {
		s.j.Executed(seq)
	}
	var kick []*boundSession
	for _, p := range pushes {
		targets := []*boundSession{p.to}
		if p.to == nil {
			targets = targets[:0]
			for _, b := range h.sessions {
				targets = append(targets, b)
			}
		}
		for _, b := range targets {
			if h.sessions[b.j.Gateway.Session] != b {
				continue // unbound meanwhile
			}
			if _, err := b.j.Push(p.payload); err != nil {
				delete(h.sessions, b.j.Gateway.Session)
				h.n.metrics.SessionsDropped.Inc()
				continue
			}
			kick = append(kick, b)
		}
	}
	h.mu.Unlock()
	for _, b := range kick {
		h.deliver(b)
	}
}

// pendingPush is a push a handler made, recorded once its call is.
type pendingPush struct {
	to      *boundSession // nil: every session (Publish)
	payload []byte
}

// deliver starts the delivery of b's pending pushes unless the object
// moves or nothing is pending: a goroutine of the node's that ends once the
// gateway holds everything. When one runs already it is kicked: it looks
// again before it ends (a push or a new binding may have come after its
// last look, and a kick dropped there would leave pushes undelivered).
func (h *hosted) deliver(b *boundSession) {
	h.mu.Lock()
	if b.delivering {
		b.kicked = true
		h.mu.Unlock()
		return
	}
	if b.sealed || h.closed || len(b.j.After(b.gwHas)) == 0 {
		h.mu.Unlock()
		return
	}
	b.delivering = true
	h.mu.Unlock()
	h.n.work.Go(func() { h.deliverLoop(b) })
}

func (h *hosted) deliverLoop(b *boundSession) {
	for {
		h.deliverPending(b)
		h.mu.Lock()
		again := b.kicked && !b.sealed && !h.closed && h.sessions[b.j.Gateway.Session] == b
		b.kicked, b.delivering = false, again
		h.mu.Unlock()
		if !again {
			return
		}
	}
}

// deliverPending sends b's pending pushes to its gateway until it holds
// them all, the gateway refuses the binding, or it stays out of reach.
func (h *hosted) deliverPending(b *boundSession) {
	n := h.n
	for failures := 0; failures < deliverAttempts; {
		h.mu.Lock()
		if b.sealed || h.closed || h.sessions[b.j.Gateway.Session] != b {
			h.mu.Unlock()
			return
		}
		b.kicked = false // this look sees everything before it
		pushes := b.j.After(b.gwHas)
		if len(pushes) > deliverBatch {
			pushes = pushes[:deliverBatch]
		}
		ref, fence := b.j.Gateway, n.wireFence(h.fence, h.version, n.rid.Hex())
		h.mu.Unlock()
		if len(pushes) == 0 {
			return
		}
		m := &pb.SessionDelivery{Object: h.name, Fence: fence, Session: ref.Proto()}
		for _, p := range pushes {
			m.Pushes = append(m.Pushes, &pb.Push{Seq: p.Seq, Payload: p.Payload})
		}
		r, err := sessionRPC(n, ref, func(ctx context.Context, c rpcpb.PeerServiceClient) (*pb.SessionDeliveryReply, error) {
			return c.SessionDeliver(ctx, m)
		})
		switch {
		case err == nil && r.GetCode() == pb.Code_CODE_OK:
			failures = 0
			h.mu.Lock()
			if b.j.Gateway == ref {
				// Only the binding it was sent under: a bind since (a
				// resume) reset gwHas to what the client has, and an
				// older gateway's count would hide those pushes from the
				// new one.
				b.gwHas = max(b.gwHas, r.GetDelivered())
			}
			h.mu.Unlock()
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

// sessionRPC calls the gateway of ref, only at the address the owner
// directory names for that live owner (a ref comes from the network).
func sessionRPC[R any](n *Node, ref session.Ref, call func(context.Context, rpcpb.PeerServiceClient) (R, error)) (R, error) {
	var zero R
	addr, ok := n.requesterAddress(&pb.Requester{OwnerId: ref.Gateway, OwnerGeneration: ref.Generation, RoutingId: ref.RoutingID[:], Address: ref.Address})
	if !ok {
		return zero, fmt.Errorf("%w: gateway %s@%d at %s is not a live owner", session.ErrStale, ref.Gateway, ref.Generation, ref.Address)
	}
	conn, err := n.peers.Get(addr)
	if err != nil {
		return zero, err
	}
	ctx, cancel := context.WithTimeout(n.life, deliverTimeout)
	defer cancel()
	return call(ctx, rpcpb.NewPeerServiceClient(conn))
}

// SessionBind (PeerService) binds a session to an object this node owns
// (activating it like a call would): a new session, a resumed one, or one
// whose gateway changed.
func (s *peerServer) SessionBind(ctx context.Context, m *pb.SessionBindRequest) (*pb.SessionBindReply, error) {
	n := s.n
	ref, err := session.RefOf(m.GetSession())
	if err != nil {
		return &pb.SessionBindReply{Code: pb.Code_CODE_PROTOCOL_ERROR, Message: err.Error()}, nil
	}
	if peer := mtls.PeerNode(ctx); n.tls != nil && peer != ref.Gateway {
		return &pb.SessionBindReply{Code: pb.Code_CODE_PERMISSION_DENIED, Message: "a bind from node " + peer + " for gateway " + ref.Gateway}, nil
	}
	obj, err := keyspace.ParseObject(m.GetObject())
	if err != nil || obj.Kind != keyspace.KindActor {
		return &pb.SessionBindReply{Code: pb.Code_CODE_INVALID_ARGUMENT, Message: fmt.Sprintf("object %q: a session binds to an actor", m.GetObject())}, nil
	}
	typ, err := n.reg.Lookup(obj.Type)
	if err != nil || !n.hosts[obj.Type] {
		return &pb.SessionBindReply{Code: pb.Code_CODE_UNKNOWN_TYPE, Message: fmt.Sprintf("this node does not host type %s", obj.Type)}, nil
	}
	h, rep := n.hostedOrActivate(ctx, obj, typ)
	if h == nil {
		return &pb.SessionBindReply{Code: rep.GetCode(), Message: rep.GetMessage(), Hint: rep.GetHint()}, nil
	}
	if rep.GetCode() == pb.Code_CODE_STATE_LOST && m.GetKnownObjectGeneration() == 0 {
		rep = nil // a new session on a re-created object: nothing was lost for it
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed || h.lost:
		return &pb.SessionBindReply{Code: pb.Code_CODE_UNAVAILABLE, Message: h.name + " is not served here any more"}, nil
	case h.mode != modeServing:
		return &pb.SessionBindReply{Code: pb.Code_CODE_RELOCATING, Message: h.name + " is moving"}, nil
	case rep.GetCode() == pb.Code_CODE_STATE_LOST ||
		(m.GetKnownObjectGeneration() != 0 && m.GetKnownObjectGeneration() < h.fence.ObjectGeneration && !h.typ.Durable):
		return &pb.SessionBindReply{Code: pb.Code_CODE_STATE_LOST, Message: fmt.Sprintf("%s was re-created (object generation %d)", h.name, h.fence.ObjectGeneration),
			Fence: n.wireFence(h.fence, h.version, n.rid.Hex())}, nil
	}
	b := h.sessions[ref.Session]
	var binding uint64
	if b == nil {
		// New, or resumed where the journal did not survive (a durable
		// object re-activated from etcd): numbering goes on after what the
		// client has.
		j := session.NewJournal(ref)
		j.NextPush, j.AckedPush, j.LastCall = m.GetReceivedPush()+1, m.GetReceivedPush(), m.GetLastCall()
		b = &boundSession{j: j, gwHas: m.GetReceivedPush()}
		if h.sessions == nil {
			h.sessions = map[session.ID]*boundSession{}
		}
		h.sessions[ref.Session] = b
		binding = j.Gateway.Binding
		n.metrics.SessionsBound.WithLabelValues("new").Inc()
	} else {
		if binding, err = b.j.Bind(ref, m.GetReceivedPush()); err != nil {
			return &pb.SessionBindReply{Code: pb.Code_CODE_PROTOCOL_ERROR, Message: err.Error()}, nil
		}
		b.gwHas = m.GetReceivedPush()
		n.metrics.SessionsBound.WithLabelValues("again").Inc()
	}
	out := &pb.SessionBindReply{Code: pb.Code_CODE_OK, Binding: binding, Fence: n.wireFence(h.fence, h.version, n.rid.Hex()), LastCall: b.j.LastCall}
	n.work.Go(func() { h.deliver(b) })
	return out, nil
}

// SessionAck (PeerService): the client has every push up to m.Push.
func (s *peerServer) SessionAck(ctx context.Context, m *pb.SessionAckRequest) (*pb.SessionAckReply, error) {
	n := s.n
	ref, err := session.RefOf(m.GetSession())
	if err != nil {
		return &pb.SessionAckReply{Code: pb.Code_CODE_PROTOCOL_ERROR}, nil
	}
	h := n.hostedObject(m.GetObject())
	if h == nil {
		return &pb.SessionAckReply{Code: pb.Code_CODE_NOT_OWNER}, nil
	}
	h.mu.Lock()
	b := h.sessions[ref.Session]
	if b == nil || !b.j.Gateway.SameGateway(ref) || b.j.Gateway.Binding != ref.Binding {
		h.mu.Unlock()
		return &pb.SessionAckReply{Code: pb.Code_CODE_STALE_FENCE}, nil
	}
	if err := b.j.Ack(m.GetPush()); err != nil {
		h.mu.Unlock()
		return &pb.SessionAckReply{Code: pb.Code_CODE_PROTOCOL_ERROR}, nil
	}
	b.gwHas = max(b.gwHas, m.GetPush())
	h.mu.Unlock()
	// The gateway holds this binding: what it refused before it took it
	// goes now.
	h.deliver(b)
	return &pb.SessionAckReply{Code: pb.Code_CODE_OK}, nil
}
