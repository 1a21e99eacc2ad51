package transport

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

type unaryOnlyOwner struct {
	rpcpb.UnimplementedCallServiceServer
	calls atomic.Int64
}

func (o *unaryOnlyOwner) Call(context.Context, *pb.CallRequest) (*pb.CallReply, error) {
	o.calls.Add(1)
	return &pb.CallReply{Code: pb.Code_CODE_OK}, nil
}

// A node without call streams (an older version during a rolling upgrade)
// answers Unimplemented, having run nothing: the caller sends that call,
// and every later one, as a unary call.
func TestStreamConnFallsBackToUnary(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(insecure.NewCredentials()))
	owner := &unaryOnlyOwner{}
	rpcpb.RegisterCallServiceServer(srv, owner)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var readers sync.WaitGroup
	c := NewStreamConn(cc, rpcpb.NewCallServiceClient(cc).CallStream, &readers)
	defer readers.Wait()
	defer c.Close()
	unary := rpcpb.NewCallServiceClient(cc).Call
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rep, err := c.Call(ctx, &pb.CallRequest{Object: "actor/counter/x", Method: "get"}, unary)
		cancel()
		if err != nil || rep.GetCode() != pb.Code_CODE_OK {
			t.Fatalf("call %d: %v %v", i, rep, err)
		}
	}
	if n := owner.calls.Load(); n != 5 {
		t.Fatalf("owner ran %d calls, want 5", n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.unary {
		t.Fatal("the connection did not remember that the node has no call stream")
	}
}
