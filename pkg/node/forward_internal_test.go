package node

import (
	"context"
	"io"
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

// fakeForwardStream feeds requests to a forwardServe and collects its
// replies.
type fakeForwardStream struct {
	grpc.ServerStream
	ctx  context.Context
	reqs chan *pb.ForwardRequest
	read atomic.Int64

	mu   sync.Mutex
	reps []*pb.ForwardReply
}

func (f *fakeForwardStream) Context() context.Context { return f.ctx }

func (f *fakeForwardStream) Recv() (*pb.ForwardRequest, error) {
	select {
	case r, ok := <-f.reqs:
		if !ok {
			return nil, io.EOF
		}
		f.read.Add(1)
		return r, nil
	case <-f.ctx.Done():
		return nil, f.ctx.Err()
	}
}

func (f *fakeForwardStream) Send(r *pb.ForwardReply) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reps = append(f.reps, r)
	return nil
}

// An owner runs at most maxForwardsInFlight calls of one stream and reads
// no further request meanwhile: a gateway (or anything with a node's
// certificate) cannot make it start goroutines without bound. Once the
// calls return, every request is answered under its own id.
func TestForwardServeCapsCallsInFlight(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &fakeForwardStream{ctx: ctx, reqs: make(chan *pb.ForwardRequest)}
	release := make(chan struct{})
	var running, peak atomic.Int64
	fs := newForwardServe(ctx, st, func(_ context.Context, r *pb.ForwardRequest) *pb.CallReply {
		peak.Store(max(peak.Load(), running.Add(1)))
		<-release
		running.Add(-1)
		return &pb.CallReply{Code: pb.Code_CODE_OK, Message: r.GetCall().GetMethod()}
	})
	done := make(chan error, 1)
	go func() { done <- fs.receive() }()
	const total = maxForwardsInFlight + 200
	sent := make(chan int, 1)
	go func() {
		k := 0
		defer func() { sent <- k }()
		for i := range total {
			select {
			case st.reqs <- &pb.ForwardRequest{Id: uint64(i + 1), Call: &pb.CallRequest{Method: "m"}}:
				k++
			case <-release:
				return
			}
		}
	}()
	// The receiver takes the first maxForwardsInFlight and then waits for
	// a free slot: the sender blocks on the next one.
	for st.read.Load() < maxForwardsInFlight {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // room to read more, had it not been capped
	if r := st.read.Load(); r != maxForwardsInFlight {
		t.Fatalf("read %d requests with %d calls in flight, want %d", r, running.Load(), maxForwardsInFlight)
	}
	close(release)
	if k := <-sent; k < maxForwardsInFlight {
		t.Fatalf("sent %d", k)
	}
	close(st.reqs)
	if err := <-done; err != nil {
		t.Fatalf("receive: %v", err)
	}
	fs.close()
	if p := peak.Load(); p > maxForwardsInFlight {
		t.Fatalf("%d calls in flight at once, cap %d", p, maxForwardsInFlight)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	seen := map[uint64]bool{}
	for _, r := range st.reps {
		if r.GetReply().GetCode() != pb.Code_CODE_OK || seen[r.GetId()] || r.GetId() == 0 || r.GetId() > total {
			t.Fatalf("reply %v", r)
		}
		seen[r.GetId()] = true
	}
	if int64(len(seen)) != st.read.Load() {
		t.Fatalf("%d replies for %d requests read", len(seen), st.read.Load())
	}
}

// A forwarded request without a call is answered invalid, not run.
func TestServeForwardRefusesEmptyRequest(t *testing.T) {
	rep := (&Node{}).serveForward(context.Background(), &pb.ForwardRequest{Id: 7})
	if rep.GetCode() != pb.Code_CODE_INVALID_ARGUMENT {
		t.Fatalf("reply %v", rep)
	}
}

type unaryOnlyOwner struct {
	rpcpb.UnimplementedCallServiceServer
	calls atomic.Int64
}

func (o *unaryOnlyOwner) Call(context.Context, *pb.CallRequest) (*pb.CallReply, error) {
	o.calls.Add(1)
	return &pb.CallReply{Code: pb.Code_CODE_OK}, nil
}

// An owner without the forward stream (an older version during a rolling
// upgrade) answers Unimplemented, having run nothing: the gateway sends
// that call, and every later one, as a unary call.
func TestConnPoolFallsBackToUnary(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(insecure.NewCredentials()))
	owner := &unaryOnlyOwner{}
	rpcpb.RegisterCallServiceServer(srv, owner)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	p := newConnPool()
	defer p.close()
	addr := lis.Addr().String()
	p.setLive(map[string]string{addr: "old"})
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rep, err := p.call(ctx, addr, &pb.CallRequest{Object: "actor/counter/x", Method: "get"})
		cancel()
		if err != nil || rep.GetCode() != pb.Code_CODE_OK {
			t.Fatalf("call %d: %v %v", i, rep, err)
		}
	}
	if n := owner.calls.Load(); n != 5 {
		t.Fatalf("owner ran %d calls, want 5", n)
	}
	c, _ := p.peer(addr)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.unary {
		t.Fatal("the pool did not remember that the owner has no forward stream")
	}
}
