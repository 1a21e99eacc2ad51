package node

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/mtls"
	"github.com/meshloc/meshloc/pkg/node/internal/hosted"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Reply routes: a request captured or sent as DATA runs on the target; its
// caller waits here, and the target relays the reply (RelayReply).

func (n *Node) unroute(w *hosted.Work) {
	if w.Route != 0 {
		n.routes.Take(w.Route)
	}
}

// handOver makes w a request that runs on target (owner id): its caller
// waits for the relayed reply, and only target may relay it. It returns
// the request as it travels, naming this node as its requester.
func (n *Node) handOver(w *hosted.Work, target string) *pb.CallRequest {
	req := proto.Clone(w.Req).(*pb.CallRequest)
	w.Relayer = target
	req.Requester = &pb.Requester{OwnerId: n.self.ID, OwnerGeneration: n.self.Generation, RoutingId: n.rid[:],
		Address: n.selfNode.Address, ReplyRoute: n.routes.Add(w)}
	return req
}

// relayAttempts and relayBackoff bound the relay of one reply; then the
// caller's retry gets it from the de-duplication table.
const (
	relayAttempts = 4
	relayBackoff  = 50 * time.Millisecond
	relayTimeout  = 2 * time.Second
)

// relayReply sends the reply of a relocated request to its requester,
// acknowledged, on a goroutine the node owns and its life bounds.
func (n *Node) relayReply(w *hosted.Work, r *pb.CallReply) {
	rr := w.Relay
	addr, ok := n.requesterAddress(rr.Requester)
	if !ok {
		// The requester names no live owner: a stale or forged address
		// (it came in a payload or a DATA frame). Nothing is dialled; the
		// caller, if it exists, retries and gets the de-duplicated reply.
		n.metrics.Relayed.WithLabelValues("not_an_owner").Inc()
		return
	}
	msg := &pb.ReplyRelay{RelocationId: rr.RelocationID, OperationId: rr.Op, ReplyRoute: rr.Route, Requester: rr.Requester, Reply: r}
	n.work.Go(func() {
		for attempt := range relayAttempts {
			ack, err := n.sendRelay(n.life, addr, msg)
			if err == nil {
				n.metrics.Relayed.WithLabelValues(wire.CodeName(ack.GetCode())).Inc()
				return
			}
			if n.life.Err() != nil || !clock.Sleep(n.clock, time.Duration(attempt+1)*relayBackoff, n.life.Done()) {
				break
			}
		}
		n.metrics.Relayed.WithLabelValues("failed").Inc()
	})
}

// sendRelay is one relay RPC.
func (n *Node) sendRelay(ctx context.Context, addr string, msg *pb.ReplyRelay) (*pb.ReplyRelayAck, error) {
	conn, err := n.peers.Get(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, relayTimeout)
	defer cancel()
	return rpcpb.NewPeerServiceClient(conn).RelayReply(ctx, msg)
}

// requesterAddress is where a relayed reply goes: the address etcd's owner
// directory names for the requester, only if the requester is exactly that
// live owner (id, generation, routing id) and claims that address.
func (n *Node) requesterAddress(rq *pb.Requester) (string, bool) {
	o, ok := n.dir.Lookup(rq.GetOwnerId())
	if !ok || o.Generation != rq.GetOwnerGeneration() || o.Descriptor.RoutingID != routingHex(rq.GetRoutingId()) || o.Descriptor.Address != rq.GetAddress() {
		return "", false
	}
	return o.Descriptor.Address, true
}

func routingHex(b []byte) string {
	r, err := wire.ParseRoutingIDBytes(b)
	if err != nil {
		return ""
	}
	return r.Hex()
}

// RelayReply (PeerService) delivers a relayed reply to the waiting caller.
func (s *peerServer) RelayReply(ctx context.Context, m *pb.ReplyRelay) (*pb.ReplyRelayAck, error) {
	n := s.n
	rq := m.GetRequester()
	if rq.GetOwnerId() != n.self.ID || rq.GetOwnerGeneration() != n.self.Generation || !n.rid.Equal(rq.GetRoutingId()) {
		n.metrics.StaleRefused.Inc()
		return &pb.ReplyRelayAck{Code: pb.Code_CODE_STALE_FENCE}, nil
	}
	// Only the target the request was handed to may answer it (known with
	// TLS); a route not pending, another request's, or not the caller's to
	// answer are one answer, not_found.
	peer := mtls.PeerNode(ctx)
	w, terminal := n.routes.Claim(m.GetReplyRoute(), m.GetOperationId(), func(w *hosted.Work) bool { return n.tls == nil || peer == w.Relayer })
	if w == nil {
		if terminal {
			return &pb.ReplyRelayAck{Code: pb.Code_CODE_ALREADY_TERMINAL}, nil
		}
		return &pb.ReplyRelayAck{Code: pb.Code_CODE_NOT_FOUND}, nil
	}
	if f := m.GetReply().GetFence(); f != nil && !n.fences.Accept(w.Req.GetObject(), f) {
		n.metrics.StaleRefused.Inc()
		m.Reply = &pb.CallReply{Code: pb.Code_CODE_STALE_FENCE, Message: "relayed reply older than a fence already seen"}
	}
	select {
	case w.Done <- m.GetReply():
	default:
	}
	return &pb.ReplyRelayAck{Code: pb.Code_CODE_OK}, nil
}
