package stages

import (
	"context"
	"sync"
)

// budget bounds the bytes of STATE chunks in flight, for the node and per
// peer: a source waits for room before it sends a chunk.
type budget struct {
	mu   sync.Mutex
	cond *sync.Cond
	max  int64
	used int64
}

func newBudget(max int64) *budget {
	b := &budget{max: max}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *budget) acquire(ctx context.Context, n int64) error {
	n = min(n, b.max)
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.used+n > b.max {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		stop := context.AfterFunc(ctx, func() { b.mu.Lock(); b.cond.Broadcast(); b.mu.Unlock() })
		b.cond.Wait()
		stop()
	}
	b.used += n
	return nil
}

func (b *budget) release(n int64) {
	n = min(n, b.max)
	b.mu.Lock()
	b.used -= n
	b.cond.Broadcast()
	b.mu.Unlock()
}

// Budgets are the node's chunk byte budgets: its own, and one per peer.
type Budgets struct {
	node    *budget
	peerMax int64
	mu      sync.Mutex
	peers   map[string]*budget
}

// NewBudgets are budgets of node bytes for the node and peer bytes per
// peer.
func NewBudgets(node, peer int64) *Budgets {
	return &Budgets{node: newBudget(node), peerMax: peer, peers: map[string]*budget{}}
}

func (b *Budgets) peer(addr string) *budget {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.peers[addr]
	if !ok {
		p = newBudget(b.peerMax)
		b.peers[addr] = p
	}
	return p
}

// Chunk is the relocator's Budget for chunks sent to addr: the node's
// bytes, then the peer's.
func (b *Budgets) Chunk(addr string) func(ctx context.Context, size int64) (func(), error) {
	peer := b.peer(addr)
	return func(ctx context.Context, size int64) (func(), error) {
		if err := b.node.acquire(ctx, size); err != nil {
			return nil, err
		}
		if err := peer.acquire(ctx, size); err != nil {
			b.node.release(size)
			return nil, err
		}
		return func() { peer.release(size); b.node.release(size) }, nil
	}
}
