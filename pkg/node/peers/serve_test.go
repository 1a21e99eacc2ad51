package peers

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

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

// An owner runs at most MaxForwardsInFlight calls of one stream and reads
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
	const total = MaxForwardsInFlight + 200
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
	// The receiver takes the first MaxForwardsInFlight and then waits for
	// a free slot: the sender blocks on the next one.
	for st.read.Load() < MaxForwardsInFlight {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // room to read more, had it not been capped
	if r := st.read.Load(); r != MaxForwardsInFlight {
		t.Fatalf("read %d requests with %d calls in flight, want %d", r, running.Load(), MaxForwardsInFlight)
	}
	close(release)
	if k := <-sent; k < MaxForwardsInFlight {
		t.Fatalf("sent %d", k)
	}
	close(st.reqs)
	if err := <-done; err != nil {
		t.Fatalf("receive: %v", err)
	}
	fs.close()
	if p := peak.Load(); p > MaxForwardsInFlight {
		t.Fatalf("%d calls in flight at once, cap %d", p, MaxForwardsInFlight)
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

// A stream's calls run on kept workers: calls one after another all run on
// one, a burst leaves at most maxIdleWorkers waiting, and close ends them
// all.
func TestForwardServeKeepsWorkers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &fakeForwardStream{ctx: ctx, reqs: make(chan *pb.ForwardRequest)}
	var hold atomic.Bool
	release := make(chan struct{})
	fs := newForwardServe(ctx, st, func(_ context.Context, r *pb.ForwardRequest) *pb.CallReply {
		if hold.Load() {
			<-release
		}
		return &pb.CallReply{Code: pb.Code_CODE_OK}
	})
	done := make(chan error, 1)
	go func() { done <- fs.receive() }()
	replies := func() int {
		st.mu.Lock()
		defer st.mu.Unlock()
		return len(st.reps)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s", what)
			}
		}
	}
	id := uint64(0)
	for range 50 {
		id++
		st.reqs <- &pb.ForwardRequest{Id: id, Call: &pb.CallRequest{Method: "m"}}
		waitFor("a reply", func() bool { return replies() == int(id) && fs.waiting.Load() == 1 })
	}
	hold.Store(true)
	const burst = maxIdleWorkers + 100
	for range burst {
		id++
		st.reqs <- &pb.ForwardRequest{Id: id, Call: &pb.CallRequest{Method: "m"}}
	}
	close(release)
	waitFor("the burst's replies", func() bool { return replies() == int(id) })
	waitFor("the workers to settle", func() bool { return fs.waiting.Load() == maxIdleWorkers })
	close(st.reqs)
	if err := <-done; err != nil {
		t.Fatalf("receive: %v", err)
	}
	fs.close() // returns once every worker ended
	if n := fs.waiting.Load(); n != 0 {
		t.Fatalf("%d workers still waiting after close", n)
	}
}
