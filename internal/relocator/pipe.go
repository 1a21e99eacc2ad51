package relocator

import (
	"errors"
	"io"
	"sync"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// ErrPipeClosed: Recv on a pipe end that was closed from this side.
var ErrPipeClosed = errors.New("relocator: pipe closed")

// Pipe returns the two ends of an in-memory relocation stream: frames sent
// on one arrive, in order, on the other. Closing an end is the stream
// ending as the other side sees it: its Recv returns io.EOF once the
// frames already sent are read, and its Send returns io.EOF (a gRPC
// stream's Send after the peer's handler returned). Its channels are made
// when Pipe is called, so a test under testing/synctest calls it inside
// the bubble.
func Pipe() (a, b Peer) {
	ab, ba := newLane(), newLane()
	return &pipeEnd{in: ba, out: ab}, &pipeEnd{in: ab, out: ba}
}

// lane is one direction: an unbounded FIFO of frames.
type lane struct {
	mu     sync.Mutex
	frames []*pb.RelocationFrame
	closed bool
	ready  chan struct{} // a token while frames are queued or the lane closed
}

func newLane() *lane { return &lane{ready: make(chan struct{}, 1)} }

func (l *lane) signal() {
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

func (l *lane) push(f *pb.RelocationFrame) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return io.EOF
	}
	l.frames = append(l.frames, f)
	l.signal()
	return nil
}

func (l *lane) close() {
	l.mu.Lock()
	l.closed = true
	l.signal()
	l.mu.Unlock()
}

// pop returns the next frame, or ok=false once the lane is closed and
// empty; it blocks until one of them holds or done fires.
func (l *lane) pop(done <-chan struct{}) (*pb.RelocationFrame, bool, bool) {
	for {
		l.mu.Lock()
		if len(l.frames) > 0 {
			f := l.frames[0]
			l.frames = l.frames[1:]
			if len(l.frames) > 0 || l.closed {
				l.signal()
			}
			l.mu.Unlock()
			return f, true, false
		}
		closed := l.closed
		if closed {
			l.signal() // for any other waiter
		}
		l.mu.Unlock()
		if closed {
			return nil, false, false
		}
		select {
		case <-l.ready:
		case <-done:
			return nil, false, true
		}
	}
}

type pipeEnd struct {
	in, out *lane
	once    sync.Once
	done    chan struct{}
	mu      sync.Mutex
}

func (p *pipeEnd) doneCh() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		p.done = make(chan struct{})
	}
	return p.done
}

func (p *pipeEnd) Send(f *pb.RelocationFrame) error { return p.out.push(f) }

func (p *pipeEnd) Recv() (*pb.RelocationFrame, error) {
	f, ok, aborted := p.in.pop(p.doneCh())
	switch {
	case aborted:
		return nil, ErrPipeClosed
	case !ok:
		return nil, io.EOF
	}
	return f, nil
}

// Close ends the stream from this side: the other side reads io.EOF after
// what was sent, and a Recv blocked here returns ErrPipeClosed.
func (p *pipeEnd) Close() {
	p.once.Do(func() {
		p.out.close()
		p.in.close()
		close(p.doneCh())
	})
}
