package node

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/pkg/node/peers"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Forward serves a gateway's forward stream (pkg/node/peers) until the
// gateway closes it, the stream breaks or the node stops; each request
// runs as a unary Call would.
func (s *peerServer) Forward(stream rpcpb.PeerService_ForwardServer) error {
	return s.n.serveCallStream(stream)
}

// serveCallStream serves a stream of calls: a gateway's forwards, or a
// client's calls (CallService.CallStream).
func (n *Node) serveCallStream(stream grpc.BidiStreamingServer[pb.ForwardRequest, pb.ForwardReply]) error {
	n.metrics.ForwardStreams.Inc()
	defer n.metrics.ForwardStreams.Dec()
	return peers.ServeForward(stream, n.serveForward, n.stopping,
		func() error { return status.Errorf(codes.Unavailable, "node: %s is stopping", n.self) }, &n.work)
}

// serveForward runs one forwarded call as Call does, bounded by the time
// the gateway still waits.
func (n *Node) serveForward(ctx context.Context, req *pb.ForwardRequest) *pb.CallReply {
	if req.GetCall() == nil {
		return &pb.CallReply{Code: pb.Code_CODE_INVALID_ARGUMENT, Message: "forward: a request without a call"}
	}
	if ms := req.GetTimeoutMs(); ms > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
		defer cancel()
	}
	rep := n.Call(ctx, req.GetCall())
	if replyWasLost(rep) {
		// (A test build's lost reply: the gateway sees an unavailable owner.)
		return &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE, Message: rep.GetMessage()}
	}
	return rep
}
