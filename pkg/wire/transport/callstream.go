package transport

import (
	"context"
	"errors"
	"io"
	"math"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The caller's side of a stream of calls: a gateway's forwards to one
// owner (PeerService.Forward), a client's calls to one node
// (CallService.CallStream). The calls to one node share one gRPC stream
// instead of a unary call each, which costs a new HTTP/2 stream, its
// headers and a goroutine on both sides per call. The node answers in the
// order the calls finish, each reply matched to its call by id.

// maxStreamedCallBytes: a larger request goes as a unary call, so that no
// small call waits behind its bytes on the shared stream.
const maxStreamedCallBytes = 64 << 10

// callStream is a stream of calls to one node: calls wait for the reply of
// their id. It is broken for good by its first error; its StreamConn then
// opens another.
type callStream struct {
	stream grpc.BidiStreamingClient[pb.ForwardRequest, pb.ForwardReply]
	cancel context.CancelFunc
	send   chan struct{} // a token: one Send at a time, given up when the caller's context ends

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan streamResult
	err     error
}

type streamResult struct {
	rep *pb.CallReply
	err error
}

// errStreamUnsupported: the node does not serve the stream (an older
// version in a rolling upgrade): its calls go unary, and nothing was run.
var errStreamUnsupported = errors.New("transport: the node does not serve call streams")

// OpenStream opens a stream of calls on a connection: the Forward or
// CallStream method of a generated client.
type OpenStream func(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[pb.ForwardRequest, pb.ForwardReply], error)

func openCallStream(open OpenStream, wg *sync.WaitGroup) (*callStream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	st, err := open(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	f := &callStream{stream: st, cancel: cancel, send: make(chan struct{}, 1), pending: map[uint64]chan streamResult{}}
	wg.Add(1)
	go func() {
		defer wg.Done()
		f.read()
	}()
	return f, nil
}

// read delivers replies to their callers until the stream ends, then
// fails every call still waiting.
func (f *callStream) read() {
	for {
		m, err := f.stream.Recv()
		if err != nil {
			if status.Code(err) == codes.Unimplemented {
				err = errStreamUnsupported
			} else if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				err = status.Error(codes.Unavailable, "call stream closed")
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
			ch <- streamResult{err: status.Error(codes.Unavailable, "call stream: the node answered without a reply")}
		} else {
			ch <- streamResult{rep: m.GetReply()}
		}
	}
}

func (f *callStream) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
	for id, ch := range f.pending {
		ch <- streamResult{err: f.err}
		delete(f.pending, id)
	}
	f.cancel()
}

func (f *callStream) broken() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err != nil
}

// call sends req and waits for its reply or the end of ctx.
func (f *callStream) call(ctx context.Context, req *pb.CallRequest) (*pb.CallReply, error) {
	ms, err := remainingMs(ctx)
	if err != nil {
		return nil, err
	}
	ch := make(chan streamResult, 1)
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
	if err != nil && !errors.Is(err, io.EOF) {
		// The stream broke on this side: read sees it and fails the
		// calls waiting.
		f.forget(id)
		f.cancel()
		return nil, status.Errorf(codes.Unavailable, "call stream: %v", err)
	}
	// (io.EOF: the node ended the stream; its status comes by Recv, and
	// read fails every call waiting with it — errStreamUnsupported for a
	// node without call streams, which StreamConn then calls unary.)
	select {
	case r := <-ch:
		return r.rep, r.err
	case <-ctx.Done():
		f.forget(id)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func (f *callStream) forget(id uint64) {
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
		return 0, status.Error(codes.DeadlineExceeded, "call stream: the call's deadline passed")
	}
	ms := (left + time.Millisecond - 1) / time.Millisecond
	return uint32(min(int64(ms), math.MaxUint32)), nil
}

// streamable reports whether req goes on the stream (small enough not to
// hold the calls behind it).
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

// Unary makes one call alone: the Call method of a generated client.
type Unary func(context.Context, *pb.CallRequest, ...grpc.CallOption) (*pb.CallReply, error)

// StreamConn is a connection's stream of calls: opened at the first call
// that may use it, opened again once broken, and given up for good when
// the node does not serve it (its calls then go unary).
type StreamConn struct {
	cc      *grpc.ClientConn
	open    OpenStream
	readers *sync.WaitGroup // the streams' readers, waited by their owner after Close

	mu     sync.Mutex
	stream *callStream // nil until the first call; replaced once broken
	unary  bool        // the node serves no call stream (an older version)
	closed bool
}

// NewStreamConn is the stream of calls of cc, opened by open; its readers
// are goroutines of readers, which the caller waits for after Close.
func NewStreamConn(cc *grpc.ClientConn, open OpenStream, readers *sync.WaitGroup) *StreamConn {
	return &StreamConn{cc: cc, open: open, readers: readers}
}

// Call sends req on the stream, or by unary when it is large, the stream
// cannot be opened now, or the node serves none.
func (c *StreamConn) Call(ctx context.Context, req *pb.CallRequest, unary Unary) (*pb.CallReply, error) {
	if streamable(req) {
		if f := c.current(); f != nil {
			rep, err := f.call(ctx, req)
			if !errors.Is(err, errStreamUnsupported) {
				return rep, err
			}
			c.mu.Lock()
			c.unary = true
			c.mu.Unlock()
		}
	}
	return unary(ctx, req)
}

// current is c's stream, opened when there is none or it broke; nil when
// the node has none, or the connection is not ready (opening a stream would
// wait for it regardless of the caller's deadline: the unary call waits
// within it, or reports why it cannot).
func (c *StreamConn) current() *callStream {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unary || c.closed {
		return nil
	}
	if c.stream == nil || c.stream.broken() {
		if c.cc.GetState() != connectivity.Ready {
			c.cc.Connect()
			return nil
		}
		f, err := openCallStream(c.open, c.readers)
		if err != nil {
			return nil
		}
		c.stream = f
	}
	return c.stream
}

// Close ends the stream (its calls waiting fail); the connection is the
// caller's to close.
func (c *StreamConn) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.stream != nil {
		c.stream.cancel()
	}
}
