package hosted

import (
	"sync"
	"time"

	"github.com/meshloc/meshloc/pkg/traffic"
)

// Traffic is the node's traffic.Sketch of the messages its objects sent,
// shared by their deliveries, fed one message in
// sample (each weighted by sample).
type Traffic struct {
	mu     sync.Mutex
	s      *traffic.Sketch
	sample uint64
	seen   uint64
}

// NewTraffic keeps the heaviest capacity edges, halving every halfLife;
// sample ≤ 1 counts every message.
func NewTraffic(capacity int, halfLife time.Duration, sample int) *Traffic {
	return &Traffic{s: traffic.New(capacity, halfLife.Milliseconds()), sample: uint64(max(sample, 1))}
}

// Observe counts one message from → to at now; cross: its destination was
// served by another node.
func (r *Traffic) Observe(now time.Time, from, to string, cross bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen++
	if r.s == nil || r.seen%r.sample != 0 {
		return
	}
	r.s.Observe(now.UnixMilli(), from, to, r.sample, cross)
}

// Snapshot is the heaviest edges at now (limit ≤ 0: all it keeps), the
// decayed totals of messages and of cross-node ones, and the capacity.
func (r *Traffic) Snapshot(now time.Time, limit int) (edges []traffic.Edge, messages, crossNode uint64, capacity int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.s == nil {
		return nil, 0, 0, 0
	}
	ms := now.UnixMilli()
	messages, crossNode = r.s.Totals(ms)
	return r.s.Top(ms, limit), messages, crossNode, r.s.Capacity()
}

// CrossRatio is the fraction of the decayed messages at now whose
// destination was on another node (0 when none).
func (r *Traffic) CrossRatio(now time.Time) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.s == nil {
		return 0
	}
	m, c := r.s.Totals(now.UnixMilli())
	if m == 0 {
		return 0
	}
	return float64(c) / float64(m)
}
