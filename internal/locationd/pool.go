package locationd

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	"github.com/meshloc/meshloc/pkg/wire/transport"
)

// poolIdle is how long a node connection may stay unused before the pool
// closes it: nodes come and go (and restart on other ports), so connections to
// addresses nobody asks for any more must not pile up, each retrying a dead
// address in the background.
const poolIdle = 2 * time.Minute

// adminPool keeps one gRPC connection per node address for the AdminService
// calls of the relocation routes. A connection is made on first use, shared by
// concurrent calls, and closed once it has been unused for idle (by a janitor
// goroutine). close cancels the calls in flight, waits for them, stops the
// janitor and closes every connection: after it returns, nothing of the pool
// runs.
type adminPool struct {
	idle   time.Duration
	ctx    context.Context // cancelled by close: ends the calls in flight
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	conns  map[string]*pooledConn

	calls   sync.WaitGroup // calls in flight (Add only under mu, before closed)
	janitor sync.WaitGroup
	stop    chan struct{}
	// creds, when set (TLS), secure every node connection: locationd's
	// certificate is presented, and the node's must be a node's of the CA.
	creds credentials.TransportCredentials
}

type pooledConn struct {
	cc    *grpc.ClientConn
	inUse int
	last  time.Time
}

func newAdminPool(idle time.Duration) *adminPool {
	ctx, cancel := context.WithCancel(context.Background())
	p := &adminPool{idle: idle, ctx: ctx, cancel: cancel, conns: map[string]*pooledConn{}, stop: make(chan struct{})}
	p.janitor.Add(1)
	go func() {
		defer p.janitor.Done()
		t := time.NewTicker(idle / 2)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case now := <-t.C:
				p.mu.Lock()
				p.sweep(now)
				p.mu.Unlock()
			}
		}
	}()
	return p
}

// sweep closes the connections unused for idle. Called with mu held.
func (p *adminPool) sweep(now time.Time) {
	for addr, pc := range p.conns {
		if pc.inUse == 0 && now.Sub(pc.last) > p.idle {
			_ = pc.cc.Close()
			delete(p.conns, addr)
		}
	}
}

// size is the number of open connections (tests).
func (p *adminPool) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// call runs f with an AdminService client of the node at addr. ctx bounds it,
// and so does the pool: close cancels it.
func (p *adminPool) call(ctx context.Context, addr string, f func(context.Context, rpcpb.AdminServiceClient) error) error {
	pc, err := p.acquire(addr)
	if err != nil {
		return err
	}
	defer p.release(pc)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.ctx, cancel)()
	return f(ctx, rpcpb.NewAdminServiceClient(pc.cc))
}

func (p *adminPool) acquire(addr string) (*pooledConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("%w: locationd is shutting down", errNodeUnavailable)
	}
	pc := p.conns[addr]
	if pc == nil {
		opts := transport.DialOptions()
		if p.creds != nil {
			opts = append(opts, grpc.WithTransportCredentials(p.creds))
		}
		cc, err := grpc.NewClient(addr, opts...)
		if err != nil {
			return nil, fmt.Errorf("%w: node address %q: %v", errNodeUnavailable, addr, err)
		}
		pc = &pooledConn{cc: cc}
		p.conns[addr] = pc
	}
	pc.inUse++
	p.calls.Add(1)
	return pc, nil
}

func (p *adminPool) release(pc *pooledConn) {
	p.mu.Lock()
	pc.inUse--
	pc.last = time.Now()
	p.mu.Unlock()
	p.calls.Done()
}

// close ends the pool; see adminPool. Idempotent.
func (p *adminPool) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	p.calls.Wait()
	close(p.stop)
	p.janitor.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, pc := range p.conns {
		_ = pc.cc.Close()
		delete(p.conns, addr)
	}
}
