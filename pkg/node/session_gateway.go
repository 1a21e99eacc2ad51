package node

import (
	"context"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node/gateway"
	"github.com/meshloc/meshloc/pkg/session"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The gateway's side of sessions is pkg/node/gateway; the node serves its
// RPCs and answers what it asks (routing, types, the owner directory).

// sessionServer is SessionService.
type sessionServer struct {
	rpcpb.UnimplementedSessionServiceServer
	n *Node
}

// Open (SessionService) is one session, held by this node as its gateway.
func (s *sessionServer) Open(stream rpcpb.SessionService_OpenServer) error {
	return s.n.gw.Open(stream)
}

// SessionDeliver (PeerService): pushes for a session this node holds.
func (s *peerServer) SessionDeliver(ctx context.Context, m *pb.SessionDelivery) (*pb.SessionDeliveryReply, error) {
	return s.n.gw.Deliver(ctx, m), nil
}

// SessionSeal (PeerService): the object of a session this node holds is
// about to move.
func (s *peerServer) SessionSeal(ctx context.Context, m *pb.SessionSealRequest) (*pb.SessionSealReply, error) {
	return s.n.gw.Seal(ctx, m), nil
}

// SessionRoute (PeerService): the move of a session's object ended.
func (s *peerServer) SessionRoute(ctx context.Context, m *pb.SessionRouteRequest) (*pb.SessionRouteReply, error) {
	return s.n.gw.Route(ctx, m), nil
}

// newGateway is this node as its sessions' gateway (Start, once the
// node's identity and address are known).
func (n *Node) newGateway() *gateway.Gateway {
	return gateway.New(gateway.Config{
		Self:        session.Ref{Gateway: n.self.ID, Generation: n.self.Generation, RoutingID: n.rid, Address: n.selfNode.Address},
		CallTimeout: n.cfg.CallTimeout, Clock: n.clock, Log: n.log, Peers: n.peers, Secured: n.tls != nil, Stopping: n.stopping,
		Metrics: gateway.Metrics{Open: n.metrics.SessionsOpen, Opened: n.metrics.SessionsOpened, Closed: n.metrics.SessionsClosed},
		Host:    gatewayHost{n},
	})
}

// gatewayHost is the node as its sessions' gateway asks it.
type gatewayHost struct{ n *Node }

func (h gatewayHost) Route(obj keyspace.Object) string { return h.n.router.Route(obj) }

func (h gatewayHost) KnownType(name string) error { return h.n.router.KnownType(name) }

func (h gatewayHost) LiveRequester(rq *pb.Requester) bool {
	_, ok := h.n.requesterAddress(rq)
	return ok
}
