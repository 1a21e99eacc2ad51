package peers

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

// A gateway's side of the forward stream (PeerService.Forward): its calls
// to one owner share one gRPC stream instead of a unary call each, which
// costs a new HTTP/2 stream, its headers and a goroutine on both sides per
// call. The owner answers in the order the calls finish.

// maxStreamedCallBytes: a larger request goes as a unary call, so that no
// small call waits behind its bytes on the shared stream.
const maxStreamedCallBytes = 64 << 10

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
	if err != nil && !errors.Is(err, io.EOF) {
		// The stream broke on this side: read sees it and fails the
		// calls waiting.
		f.forget(id)
		f.cancel()
		return nil, status.Errorf(codes.Unavailable, "forward stream: %v", err)
	}
	// (io.EOF: the owner ended the stream; its status comes by Recv, and
	// read fails every call waiting with it — errForwardUnsupported for an
	// owner without forward streams, which the pool then calls unary.)
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
