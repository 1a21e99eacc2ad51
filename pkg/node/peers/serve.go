package peers

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/meshloc/meshloc/pkg/tracing"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// An owner's side of the forward stream: it serves each request exactly as
// a unary Call (the node's serve: same checks, same metrics) and answers
// in the order the calls finish.

// MaxForwardsInFlight bounds the calls an owner runs for one stream: it
// reads no further request until one is answered (HTTP/2 flow control then
// holds the gateway back).
const MaxForwardsInFlight = 1024

// ServeForward serves a gateway's forward stream, each request by serve,
// until the gateway closes it, the stream breaks, or stopping is closed
// (then it ends with stopped's error and the gateway retries elsewhere, as
// after a unary call to a stopping node). Calls in flight still answer.
// The stream's reader can be woken from Recv only by the stream's end,
// which comes when this returns: it runs as a goroutine of owner's, which
// the node waits for after its server stopped.
func ServeForward(stream rpcpb.PeerService_ForwardServer, serve func(context.Context, *pb.ForwardRequest) *pb.CallReply,
	stopping <-chan struct{}, stopped func() error, owner *sync.WaitGroup) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	fs := newForwardServe(ctx, stream, serve)
	recvErr := make(chan error, 1)
	owner.Add(1)
	go func() {
		defer owner.Done()
		recvErr <- fs.receive()
	}()
	var err error
	select {
	case err = <-recvErr:
	case <-stopping:
		err = stopped()
	}
	fs.close()
	return err
}

// forwardServe runs one stream's calls.
type forwardServe struct {
	ctx    context.Context
	stream grpc.BidiStreamingServer[pb.ForwardRequest, pb.ForwardReply]
	serve  func(context.Context, *pb.ForwardRequest) *pb.CallReply
	slots  chan struct{} // one per call in flight

	mu     sync.Mutex // guards closed and the start of a call
	closed bool
	calls  sync.WaitGroup // the workers
	send   sync.Mutex     // one Send at a time
	// idle hands a request to a worker waiting for one (unbuffered: a
	// send succeeds only when one waits); done, closed by close, ends
	// the waiting workers.
	idle    chan *pb.ForwardRequest
	done    chan struct{}
	waiting atomic.Int32 // workers waiting on idle
}

// maxIdleWorkers is how many workers of one stream wait for its next
// request; one that finishes beyond them ends.
const maxIdleWorkers = 64

func newForwardServe(ctx context.Context, st grpc.BidiStreamingServer[pb.ForwardRequest, pb.ForwardReply],
	serve func(context.Context, *pb.ForwardRequest) *pb.CallReply) *forwardServe {
	// Each call carries its own trace context (CallRequest.traceparent).
	return &forwardServe{ctx: tracing.WithoutParent(ctx), stream: st, serve: serve, slots: make(chan struct{}, MaxForwardsInFlight),
		idle: make(chan *pb.ForwardRequest), done: make(chan struct{})}
}

// receive reads requests and starts a call for each while a slot is free;
// its result is the stream's end (nil when the gateway closed it).
func (fs *forwardServe) receive() error {
	for {
		select {
		case fs.slots <- struct{}{}:
		case <-fs.ctx.Done():
			return fs.ctx.Err()
		}
		req, err := fs.stream.Recv()
		if err != nil {
			<-fs.slots
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if !fs.start(req) {
			return nil
		}
	}
}

func (fs *forwardServe) start(req *pb.ForwardRequest) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		<-fs.slots
		return false
	}
	select {
	case fs.idle <- req: // a worker was waiting
		return true
	default:
	}
	fs.calls.Add(1)
	go fs.work(req)
	return true
}

// work serves req, then each request handed to it, until the stream's
// end. Workers are kept, not started per call: a call's serving runs deep
// enough to grow a new goroutine's stack, a copy per call that a kept
// worker makes once (measured: a call through a gateway 20 % faster).
// At most maxIdleWorkers wait; the others end with their call.
func (fs *forwardServe) work(req *pb.ForwardRequest) {
	defer fs.calls.Done()
	for {
		rep := fs.serve(fs.ctx, req)
		fs.send.Lock()
		// A Send that fails means the stream ended: the gateway fails its
		// calls in flight and retries them (the same operation ids).
		_ = fs.stream.Send(&pb.ForwardReply{Id: req.GetId(), Reply: rep})
		fs.send.Unlock()
		<-fs.slots
		if fs.waiting.Add(1) > maxIdleWorkers {
			fs.waiting.Add(-1)
			return
		}
		select {
		case req = <-fs.idle:
			fs.waiting.Add(-1)
		case <-fs.done:
			fs.waiting.Add(-1)
			return
		}
	}
}

// close starts no further call and waits for those in flight.
func (fs *forwardServe) close() {
	fs.mu.Lock()
	fs.closed = true
	close(fs.done)
	fs.mu.Unlock()
	fs.calls.Wait()
}
