package node

import (
	"context"
	"time"

	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/session"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Sessions move with their object. Before the capture the source seals
// every bound session at its gateway (which then keeps the client's calls)
// and stops delivering; the journals travel in the payload; after the
// commit the target routes each session to itself at its gateway (which
// sends it the kept calls), after an abort the source routes them back.
//
// The seal is an ordering courtesy, not a safety fence: a call a gateway
// forwards to the source after the seal is queued by the sealed mailbox
// and executed once, on whichever side ends up owning the object. So a
// gateway that does not answer the seal in time does not stop the move; it
// finds the object by binding again (its seal times out, or its call is
// redirected).

// Session move bounds.
const (
	routeAttempts = 3
	routeBackoff  = 100 * time.Millisecond
)

// sendSeal sends a seal once, within ctx.
func (n *Node) sendSeal(ctx context.Context, ref session.Ref, req *pb.SessionSealRequest) pb.Code {
	r, err := sessionRPCCtx(ctx, n, ref, func(ctx context.Context, c rpcpb.PeerServiceClient) (*pb.SessionSealReply, error) {
		return c.SessionSeal(ctx, req)
	})
	if err != nil {
		return wire.CodeOf(err)
	}
	return r.GetCode()
}

// sendRoute sends a route, again after an error (a few times: a gateway
// that stays out of reach binds again when its seal times out).
func (n *Node) sendRoute(ref session.Ref, req *pb.SessionRouteRequest) pb.Code {
	for attempt := range routeAttempts {
		r, err := sessionRPC(n, ref, func(ctx context.Context, c rpcpb.PeerServiceClient) (*pb.SessionRouteReply, error) {
			return c.SessionRoute(ctx, req)
		})
		if err == nil {
			return r.GetCode()
		}
		if !clock.Sleep(n.clock, time.Duration(attempt+1)*routeBackoff, n.life.Done()) {
			break
		}
	}
	return pb.Code_CODE_UNAVAILABLE
}

// sessionRPCCtx is sessionRPC within ctx.
func sessionRPCCtx[R any](ctx context.Context, n *Node, ref session.Ref, call func(context.Context, rpcpb.PeerServiceClient) (R, error)) (R, error) {
	return sessionRPC(n, ref, func(c2 context.Context, c rpcpb.PeerServiceClient) (R, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(c2, cancel)
		defer stop()
		return call(ctx, c)
	})
}
