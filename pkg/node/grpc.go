package node

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/pkg/mtls"
	"github.com/meshloc/meshloc/pkg/wire"

	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

type callServer struct {
	rpcpb.UnimplementedCallServiceServer
	n *Node
}

func (s *callServer) Call(ctx context.Context, req *pb.CallRequest) (*pb.CallReply, error) {
	rep := s.n.Call(ctx, req)
	if replyWasLost(rep) {
		return nil, status.Error(codes.Unavailable, rep.GetMessage())
	}
	return rep, nil
}

// CallStream serves a client's stream of calls (pkg/wire/transport's
// StreamConn) as the forward stream of a gateway: each call runs as a
// unary Call would, with the same checks, metrics and authorization.
func (s *callServer) CallStream(stream rpcpb.CallService_CallStreamServer) error {
	return s.n.serveCallStream(stream)
}

// peerServer is the node-to-node service; relocation fills it in.
type peerServer struct {
	rpcpb.UnimplementedPeerServiceServer
	n *Node
}

func errProtocol(msg string) error {
	return status.Error(codes.InvalidArgument, "relocation protocol: "+msg)
}

// adminServer serves operators (through locationd).
type adminServer struct {
	rpcpb.UnimplementedAdminServiceServer
	n *Node
}

func (s *adminServer) Relocate(ctx context.Context, c *pb.RelocateCommand) (*pb.RelocationStatus, error) {
	timeout, err := s.n.timeoutOfMs(c.GetTimeoutMs())
	var st *pb.RelocationStatus
	if err == nil {
		st, err = s.n.Relocate(ctx, c.GetObject(), RelocateOptions{Target: c.GetTarget(), Timeout: timeout, Detach: c.GetDetach(), Foreground: c.GetForeground(), NoPrecopy: c.GetNoPrecopy()})
	}
	return st, wire.StatusError(err)
}

func (s *adminServer) ListRelocations(context.Context, *pb.ListRelocationsRequest) (*pb.ListRelocationsResponse, error) {
	return &pb.ListRelocationsResponse{Relocations: s.n.Relocations()}, nil
}

// rpcAction is the one table of what each RPC needs (pkg/mtls.Allowed says
// which roles may): calls any cluster identity, the peer protocol a node,
// ListRelocations and Traffic a reader, the other admin RPCs an operator (locationd
// acts for its verified callers). An RPC not in it is refused.
func rpcAction(fullMethod string) (mtls.Action, bool) {
	svc, method, _ := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	switch svc {
	case rpcpb.CallService_ServiceDesc.ServiceName, rpcpb.SessionService_ServiceDesc.ServiceName:
		return mtls.ActionCall, true
	case rpcpb.PeerService_ServiceDesc.ServiceName:
		return mtls.ActionPeer, true
	case rpcpb.AdminService_ServiceDesc.ServiceName:
		if method == "ListRelocations" || method == "WatchEvents" || method == "Traffic" {
			return mtls.ActionRead, true
		}
		return mtls.ActionOperate, true
	case healthpb.Health_ServiceDesc.ServiceName, reflectionv1.ServerReflection_ServiceDesc.ServiceName,
		reflectionv1alpha.ServerReflection_ServiceDesc.ServiceName:
		return mtls.ActionRead, true // health and reflection (health.go): what anyone who may read may see
	}
	return "", false
}
