package node

// The owner's side of the session RPCs: binds, acks, and the calls it
// makes to a session's gateway (pushes, seals, routes).

import (
	"context"
	"fmt"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/mtls"
	"github.com/meshloc/meshloc/pkg/node/internal/hosted"
	"github.com/meshloc/meshloc/pkg/session"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

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
	ctx, cancel := context.WithTimeout(n.life, hosted.DeliverTimeout)
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
	h.Mu.Lock()
	defer h.Mu.Unlock()
	switch {
	case h.Closed || h.Lost:
		return &pb.SessionBindReply{Code: pb.Code_CODE_UNAVAILABLE, Message: h.Name() + " is not served here any more"}, nil
	case h.Mode != hosted.ModeServing:
		return &pb.SessionBindReply{Code: pb.Code_CODE_RELOCATING, Message: h.Name() + " is moving"}, nil
	case rep.GetCode() == pb.Code_CODE_STATE_LOST:
		return &pb.SessionBindReply{Code: pb.Code_CODE_STATE_LOST, Message: fmt.Sprintf("%s was re-created (object generation %d)", h.Name(), h.Fence.ObjectGeneration),
			Fence: n.wireFence(h.Fence, h.Version, n.rid.Hex())}, nil
	}
	if code, msg := h.OutdatedLocked(m.GetKnownObjectGeneration(), wire.OperationID{}); code != pb.Code_CODE_OK {
		return &pb.SessionBindReply{Code: code, Message: msg, Fence: n.wireFence(h.Fence, h.Version, n.rid.Hex())}, nil
	}
	b := h.Sessions[ref.Session]
	var binding uint64
	if b == nil {
		// New, or resumed where the journal did not survive (a durable
		// object re-activated from etcd): numbering goes on after what the
		// client has.
		j := session.NewJournal(ref)
		j.NextPush, j.AckedPush, j.LastCall = m.GetReceivedPush()+1, m.GetReceivedPush(), m.GetLastCall()
		b = &hosted.BoundSession{J: j, GwHas: m.GetReceivedPush()}
		if h.Sessions == nil {
			h.Sessions = map[session.ID]*hosted.BoundSession{}
		}
		h.Sessions[ref.Session] = b
		binding = j.Gateway.Binding
		n.metrics.SessionsBound.WithLabelValues("new").Inc()
	} else {
		if binding, err = b.J.Bind(ref, m.GetReceivedPush()); err != nil {
			return &pb.SessionBindReply{Code: pb.Code_CODE_PROTOCOL_ERROR, Message: err.Error()}, nil
		}
		b.GwHas = m.GetReceivedPush()
		n.metrics.SessionsBound.WithLabelValues("again").Inc()
	}
	out := &pb.SessionBindReply{Code: pb.Code_CODE_OK, Binding: binding, Fence: n.wireFence(h.Fence, h.Version, n.rid.Hex()), LastCall: b.J.LastCall}
	n.work.Go(func() { h.Deliver(b) })
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
	h.Mu.Lock()
	b := h.Sessions[ref.Session]
	if b == nil || !b.J.Gateway.SameGateway(ref) || b.J.Gateway.Binding != ref.Binding {
		h.Mu.Unlock()
		return &pb.SessionAckReply{Code: pb.Code_CODE_STALE_FENCE}, nil
	}
	if err := b.J.Ack(m.GetPush()); err != nil {
		h.Mu.Unlock()
		return &pb.SessionAckReply{Code: pb.Code_CODE_PROTOCOL_ERROR}, nil
	}
	b.GwHas = max(b.GwHas, m.GetPush())
	h.Mu.Unlock()
	// The gateway holds this binding: what it refused before it took it
	// goes now.
	h.Deliver(b)
	return &pb.SessionAckReply{Code: pb.Code_CODE_OK}, nil
}
