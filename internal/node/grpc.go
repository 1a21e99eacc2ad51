package node

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

type callServer struct {
	rpcpb.UnimplementedCallServiceServer
	n *Node
}

func (s *callServer) Call(ctx context.Context, req *pb.CallRequest) (*pb.CallReply, error) {
	return s.n.Call(ctx, req), nil
}

// peerServer is the node-to-node service; relocation fills it in.
type peerServer struct {
	rpcpb.UnimplementedPeerServiceServer
	n *Node
}

func (s *peerServer) Relocate(stream rpcpb.PeerService_RelocateServer) error {
	return status.Error(codes.Unimplemented, errNotImplemented.Error()+": relocation")
}
