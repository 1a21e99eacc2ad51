package node_test

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// echoServer is the raw gRPC unary baseline: the same service and messages,
// no routing, no object, no etcd.
type echoServer struct {
	rpcpb.UnimplementedCallServiceServer
}

func (echoServer) Call(_ context.Context, r *pb.CallRequest) (*pb.CallReply, error) {
	return &pb.CallReply{Code: pb.Code_CODE_OK, Payload: []byte(`{"value":1}`), Fence: &pb.Fence{OwnerId: "x"}}, nil
}

func rawServer(b *testing.B) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := grpc.NewServer()
	rpcpb.RegisterCallServiceServer(s, echoServer{})
	go s.Serve(lis)
	b.Cleanup(s.Stop)
	return lis.Addr().String()
}

// BenchmarkCall compares, in one run: raw gRPC unary (the call-path limit),
// a call through the Go client straight to the owner, and a call through a
// gateway node that forwards to the owner. Ratios to raw are reported.
func BenchmarkCall(b *testing.B) {
	m := startMesh(b, 2, func(i int, c *node.Config) {
		if i == 1 {
			c.Weight = 0 // a pure gateway: the object lives on node 1
		}
	})
	ctx := context.Background()
	direct := newClient(b, client.Config{Etcd: m.etcd})
	if _, err := direct.Call(ctx, "actor/counter/bench", "add", "1"); err != nil {
		b.Fatal(err)
	}
	gateway := newClient(b, client.Config{Nodes: []string{m.nodes[1].Address()}})
	raw := rawServer(b)
	conn, err := grpc.NewClient(raw, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	rc := rpcpb.NewCallServiceClient(conn)

	b.Run("raw-grpc", func(b *testing.B) {
		timed(b, func() error {
			op := wire.NewOperationID()
			_, err := rc.Call(ctx, &pb.CallRequest{Version: 1, Object: "actor/counter/bench", Method: "get", OperationId: op[:]})
			return err
		})
	})
	b.Run("client-direct", func(b *testing.B) {
		timed(b, func() error { _, err := direct.Call(ctx, "actor/counter/bench", "get"); return err })
	})
	b.Run("client-direct-add", func(b *testing.B) {
		timed(b, func() error { _, err := direct.Call(ctx, "actor/counter/bench", "add", "1"); return err })
	})
	b.Run("gateway", func(b *testing.B) {
		timed(b, func() error { _, err := gateway.Call(ctx, "actor/counter/bench", "get"); return err })
	})
}

// timed runs f per iteration and reports the p50 and p99 latency beside ns/op.
func timed(b *testing.B, f func() error) {
	lat := make([]time.Duration, 0, 1<<16)
	for b.Loop() {
		t0 := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	}
}
