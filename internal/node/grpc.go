package node

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"

	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

type callServer struct {
	rpcpb.UnimplementedCallServiceServer
	n *Node
}

func (s *callServer) Call(ctx context.Context, req *pb.CallRequest) (*pb.CallReply, error) {
	rep := s.n.Call(ctx, req)
	if failpoint.Enabled && rep == replyLost {
		return nil, status.Error(codes.Unavailable, rep.GetMessage())
	}
	return rep, nil
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
		st, err = s.n.Relocate(ctx, c.GetObject(), RelocateOptions{Target: c.GetTarget(), Timeout: timeout})
	}
	switch {
	case err == nil:
		return st, nil
	case errors.Is(err, ErrInvalidRelocation):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrNotHosted), errors.Is(err, ErrGroupMember):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, authority.ErrGroupTooLarge):
		return nil, status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, authority.ErrNotFound):
		return nil, status.Error(codes.NotFound, err.Error())
	case errors.Is(err, ErrAlreadyRelocating):
		return nil, status.Error(codes.Aborted, err.Error())
	case errors.Is(err, ErrNoTarget):
		return nil, status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, keyspace.ErrInvalidName):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return nil, status.Error(codes.Unavailable, err.Error())
}

func (s *adminServer) ListRelocations(context.Context, *pb.ListRelocationsRequest) (*pb.ListRelocationsResponse, error) {
	return &pb.ListRelocationsResponse{Relocations: s.n.Relocations()}, nil
}
