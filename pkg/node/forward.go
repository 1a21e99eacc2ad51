package node

import (
	"context"
	"errors"
	"io"
	"math"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The forward stream (PeerService.Forward): a gateway's calls to one owner
// share one gRPC stream instead of a unary call each, which costs a new
// HTTP/2 stream, its headers and a goroutine on both sides per call. The
// owner serves each request exactly as a unary Call (same checks, same
// metrics) and answers in the order the calls finish.

const (
	// maxForwardsInFlight bounds the calls an owner runs for one stream:
	// it reads no further request until one is answered (HTTP/2 flow
	// control then holds the gateway back).
	maxForwardsInFlight = 1024
	// maxStreamedCallBytes: a larger request goes as a unary call, so that
	// no small call waits behind its bytes on the shared stream.
	maxStreamedCallBytes = 64 << 10
)

// ---------------------------------------------------------------- owner

// Forward serves a gateway's forward stream until the gateway closes it,
// the stream breaks or the node stops (the gateway then retries
// elsewhere, as after a unary call to a stopping node).
func (s *peerServer) Forward(stream rpcpb.PeerService_ForwardServer) error {
	n := s.n
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	n.metrics.forwardStreams.Inc()
	defer n.metrics.forwardStreams.Dec()
	fs := newForwardServe(ctx, stream, n.serveForward)
	recvErr := make(chan error, 1)
	// The receiver is the one reader of the stream; it can only be woken
	// from Recv by the stream's end, which comes when this handler returns,
	// so the node's work group (waited after the server stopped) owns it.
	n.work.Add(1)
	go func() {
		defer n.work.Done()
		recvErr <- fs.receive()
	}()
	var err error
	select {
	case err = <-recvErr:
	case <-n.stopping:
		err = status.Errorf(codes.Unavailable, "node: %s is stopping", n.self)
	}
	fs.close() // calls in flight still answer (a stopping node's at once)
	return err
}

// forwardServe runs one stream's calls (serve: Node.serveForward).
type forwardServe struct {
	ctx    context.Context
	stream grpc.BidiStreamingServer[pb.ForwardRequest, pb.ForwardReply]
	serve  func(context.Context, *pb.ForwardRequest) *pb.CallReply
	slots  chan struct{} // one per call in flight

	mu     sync.Mutex // guards closed and the start of a call
	closed bool
	calls  sync.WaitGroup
	send   sync.Mutex // one Send at a time
}

func newForwardServe(ctx context.Context, st grpc.BidiStreamingServer[pb.ForwardRequest, pb.ForwardReply],
	serve func(context.Context, *pb.ForwardRequest) *pb.CallReply) *forwardServe {
	return &forwardServe{ctx: ctx, stream: st, serve: serve, slots: make(chan struct{}, maxForwardsInFlight)}
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
	fs.calls.Add(1)
	go func() {
		defer fs.calls.Done()
		defer func() { <-fs.slots }()
		rep := fs.serve(fs.ctx, req)
		fs.send.Lock()
		// A Send that fails means the stream ended: the gateway fails its
		// calls in flight and retries them (the same operation ids).
		_ = fs.stream.Send(&pb.ForwardReply{Id: req.GetId(), Reply: rep})
		fs.send.Unlock()
	}()
	return true
}

// close starts no further call and waits for those in flight.
func (fs *forwardServe) close() {
	fs.mu.Lock()
	fs.closed = true
	fs.mu.Unlock()
	fs.calls.Wait()
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

// ---------------------------------------------------------------- gateway

// forwardStream is a gateway's stream to one owner: calls wait for the
// reply of their id. It is broken for good by its first error; the pool
// then opens another.
type forwardStream struct {
	stream grpc.BidiStreamingClient[pb.ForwardRequest, pb.ForwardReply]
	cancel context.CancelFunc
	send   chan struct{} // a token: one Send at a time, given up when the caller's context ends

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan forwardResult
	err     error
}

type forwardResult struct {
	rep *pb.CallReply
	err error
}

// errForwardUnsupported: the owner has no Forward (an older version in a
// rolling upgrade): its calls go unary, and nothing was run.
var errForwardUnsupported = errors.New("node: the owner does not serve forward streams")

func openForward(cc *grpc.ClientConn, wg *sync.WaitGroup) (*forwardStream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	st, err := rpcpb.NewPeerServiceClient(cc).Forward(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	f := &forwardStream{stream: st, cancel: cancel, send: make(chan struct{}, 1), pending: map[uint64]chan forwardResult{}}
	wg.Add(1)
	go func() {
		defer wg.Done()
		f.read()
	}()
	return f, nil
}

// read delivers replies to their callers until the stream ends, then
// fails every call still waiting.
func (f *forwardStream) read() {
	for {
		m, err := f.stream.Recv()
		if err != nil {
			if status.Code(err) == codes.Unimplemented {
				err = errForwardUnsupported
			} else if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				err = status.Error(codes.Unavailable, "forward stream closed")
			}
			f.fail(err)
			return
		}
		f.mu.Lock()
		ch, ok := f.pending[m.GetId()]
		delete(f.pending, m.GetId())
		f.mu.Unlock()
		if !ok {
			continue // a call that gave up, or an id the owner made up
		}
		if m.GetReply() == nil {
			ch <- forwardResult{err: status.Error(codes.Unavailable, "forward: the owner answered without a reply")}
		} else {
			ch <- forwardResult{rep: m.GetReply()}
		}
	}
}

func (f *forwardStream) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
	for id, ch := range f.pending {
		ch <- forwardResult{err: f.err}
		delete(f.pending, id)
	}
	f.cancel()
}

func (f *forwardStream) broken() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err != nil
}

// call sends req and waits for its reply or the end of ctx.
func (f *forwardStream) call(ctx context.Context, req *pb.CallRequest) (*pb.CallReply, error) {
	ms, err := remainingMs(ctx)
	if err != nil {
		return nil, err
	}
	ch := make(chan forwardResult, 1)
	f.mu.Lock()
	if f.err != nil {
		f.mu.Unlock()
		return nil, f.err
	}
	f.next++
	id := f.next
	f.pending[id] = ch
	f.mu.Unlock()
	select {
	case f.send <- struct{}{}:
	case <-ctx.Done():
		f.forget(id)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	err = f.stream.Send(&pb.ForwardRequest{Id: id, Call: req, TimeoutMs: ms})
	<-f.send
	if err != nil {
		// The stream ended: read sees why and fails the calls waiting.
		f.forget(id)
		f.cancel()
		return nil, status.Errorf(codes.Unavailable, "forward stream: %v", err)
	}
	select {
	case r := <-ch:
		return r.rep, r.err
	case <-ctx.Done():
		f.forget(id)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func (f *forwardStream) forget(id uint64) {
	f.mu.Lock()
	delete(f.pending, id)
	f.mu.Unlock()
}

// remainingMs is the time left before ctx's deadline, in whole
// milliseconds rounded up (0: no deadline).
func remainingMs(ctx context.Context) (uint32, error) {
	d, ok := ctx.Deadline()
	if !ok {
		return 0, nil
	}
	left := time.Until(d)
	if left <= 0 {
		return 0, status.Error(codes.DeadlineExceeded, "forward: the call's deadline passed")
	}
	ms := (left + time.Millisecond - 1) / time.Millisecond
	return uint32(min(int64(ms), math.MaxUint32)), nil
}

// streamable reports whether req goes on the forward stream (small
// enough not to hold the calls behind it).
func streamable(req *pb.CallRequest) bool {
	size := len(req.GetObject()) + len(req.GetMethod())
	for _, a := range req.GetArgs() {
		size += len(a)
		if size > maxStreamedCallBytes {
			return false
		}
	}
	return size <= maxStreamedCallBytes
}
