package fanout

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// A client that does not read its stream has it closed (Unavailable: a
// clientv3 client resumes its watches), and the fan-out says so.
func TestSlowClientIsCut(t *testing.T) {
	r := setup(t, Options{Queue: 4})
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32))) // as clientv3's

	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ws, err := pb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: []byte(served), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(served)), StartRevision: 1}}}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 64<<10)
	for i := 0; value(r.hub.m.slow) == 0; i++ {
		if i > 2000 {
			t.Fatal("a client that reads nothing was never cut")
		}
		if _, err := r.etcd.Put(ctx, fmt.Sprintf("%sk%d", served, i%50), big); err != nil {
			t.Fatal(err)
		}
	}
	for {
		if _, err := ws.Recv(); err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("stream ended with %v, want unavailable", err)
			}
			return
		}
	}
}

// A client stream holds at most maxWatchesPerStream watches: the next
// create is refused with the reason, the others keep being served.
func TestWatchesPerStreamAreCapped(t *testing.T) {
	r := setup(t, Options{})
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ws, err := pb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range maxWatchesPerStream + 1 {
		if err := ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
			Key: []byte(served), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(served))}}}); err != nil {
			t.Fatal(err)
		}
	}
	created := 0
	for {
		resp, err := ws.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Canceled {
			if created != maxWatchesPerStream || !strings.Contains(resp.CancelReason, ErrTooMany.Error()) {
				t.Fatalf("refused after %d watches: %q", created, resp.CancelReason)
			}
			break
		}
		if resp.Created {
			created++
		}
	}
	put, err := r.etcd.Put(ctx, served+"k", "v")
	if err != nil {
		t.Fatal(err)
	}
	for seen := 0; seen < maxWatchesPerStream; {
		resp, err := ws.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Events) == 1 && resp.Events[0].Kv.ModRevision == put.Header.Revision {
			seen++
		}
	}
}
