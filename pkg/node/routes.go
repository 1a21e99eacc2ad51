package node

import (
	"context"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/mtls"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Reply routes: a request captured or sent as DATA runs on the target; its
// caller waits here, and the target relays the reply (RelayReply).

// relayRoute is where the reply of a request captured on a source goes.
type relayRoute struct {
	route        uint64
	relocationID []byte
	op           []byte
	requester    *pb.Requester
}

func relayOf(q *pb.CallRequest, relocationID []byte) *relayRoute {
	rq := q.GetRequester()
	if rq.GetAddress() == "" || rq.GetReplyRoute() == 0 {
		return nil
	}
	return &relayRoute{route: rq.GetReplyRoute(), relocationID: relocationID, op: q.GetOperationId(), requester: rq}
}

// pendingRoutes are this node's requests that run elsewhere (captured or
// sent as DATA): their callers wait here for a relayed reply.
type pendingRoutes struct {
	mu    sync.Mutex
	next  uint64
	byID  map[uint64]*work
	ended map[uint64]wire.OperationID // recently answered (their requests), for alreadyTerminal
	order []uint64
}

func newPendingRoutes() *pendingRoutes {
	return &pendingRoutes{byID: map[uint64]*work{}, ended: map[uint64]wire.OperationID{}}
}

func (p *pendingRoutes) add(w *work) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.route == 0 {
		p.next++
		w.route = p.next
	}
	p.byID[w.route] = w
	return w.route
}

// take removes and returns the pending work of route, whoever's it is
// (the node's own bookkeeping: a request that ended otherwise).
func (p *pendingRoutes) take(route uint64) *work {
	w, _ := p.takeIf(route, func(*work) bool { return true })
	return w
}

// claim removes and returns the pending work of route if it is exactly
// the request op and may lets its caller answer it; terminal reports that
// route answered request op before. Anything else — no such route,
// another request's, not the caller's to answer — is the same nil,
// false: a prober learns nothing of the routes pending.
func (p *pendingRoutes) claim(route uint64, op []byte, may func(*work) bool) (w *work, terminal bool) {
	w, e := p.takeIf(route, func(w *work) bool { return string(w.op[:]) == string(op) && may(w) })
	return w, w == nil && e != nil && string(e[:]) == string(op)
}

// takeIf removes and returns the pending work of route if ok accepts it;
// otherwise it returns the request route answered, if it was.
func (p *pendingRoutes) takeIf(route uint64, ok func(*work) bool) (*work, *wire.OperationID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w, found := p.byID[route]; found && ok(w) {
		delete(p.byID, route)
		p.ended[route] = w.op
		p.order = append(p.order, route)
		if len(p.order) > 65536 {
			delete(p.ended, p.order[0])
			p.order = p.order[1:]
		}
		return w, nil
	}
	if e, found := p.ended[route]; found {
		return nil, &e
	}
	return nil, nil
}

func (n *Node) unroute(w *work) {
	if w.route != 0 {
		n.routes.take(w.route)
	}
}

// handOver makes w a request that runs on target (owner id): its caller
// waits for the relayed reply, and only target may relay it. It returns
// the request as it travels, naming this node as its requester.
func (n *Node) handOver(w *work, target string) *pb.CallRequest {
	req := proto.Clone(w.req).(*pb.CallRequest)
	w.relayer = target
	req.Requester = &pb.Requester{OwnerId: n.self.ID, OwnerGeneration: n.self.Generation, RoutingId: n.rid[:],
		Address: n.selfNode.Address, ReplyRoute: n.routes.add(w)}
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
func (n *Node) relayReply(w *work, r *pb.CallReply) {
	rr := w.relay
	addr, ok := n.requesterAddress(rr.requester)
	if !ok {
		// The requester names no live owner: a stale or forged address
		// (it came in a payload or a DATA frame). Nothing is dialled; the
		// caller, if it exists, retries and gets the de-duplicated reply.
		n.metrics.Relayed.WithLabelValues("not_an_owner").Inc()
		return
	}
	msg := &pb.ReplyRelay{RelocationId: rr.relocationID, OperationId: rr.op, ReplyRoute: rr.route, Requester: rr.requester, Reply: r}
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
	w, terminal := n.routes.claim(m.GetReplyRoute(), m.GetOperationId(), func(w *work) bool { return n.tls == nil || peer == w.relayer })
	if w == nil {
		if terminal {
			return &pb.ReplyRelayAck{Code: pb.Code_CODE_ALREADY_TERMINAL}, nil
		}
		return &pb.ReplyRelayAck{Code: pb.Code_CODE_NOT_FOUND}, nil
	}
	if f := m.GetReply().GetFence(); f != nil && !n.fences.Accept(w.req.GetObject(), f) {
		n.metrics.StaleRefused.Inc()
		m.Reply = &pb.CallReply{Code: pb.Code_CODE_STALE_FENCE, Message: "relayed reply older than a fence already seen"}
	}
	select {
	case w.done <- m.GetReply():
	default:
	}
	return &pb.ReplyRelayAck{Code: pb.Code_CODE_OK}, nil
}
