package node

import (
	"sync"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// countAnswer counts one applied answer of h's: delivered (local or
// remote) or refused, its latency, and its edge in the traffic sketch.
func (n *Node) countAnswer(h *hosted, a messageAnswer, now time.Time) {
	m := n.metrics.Messages
	m.Latency.Observe(max(now.Sub(a.msg.ID.Time()), 0).Seconds())
	if a.outcome == actor.OutcomeRefused {
		m.Refused.Inc()
		return
	}
	f := a.reply.GetFence()
	local := f != nil && f.GetOwnerId() == n.self.ID && f.GetOwnerGeneration() == n.self.Generation
	path := "remote"
	if local {
		path = "local"
	}
	m.Delivered.WithLabelValues(path).Inc()
	if f != nil && a.reply.GetCode() != pb.Code_CODE_UNSPECIFIED {
		n.traffic.observe(now, h.name, a.msg.To, !local)
	}
}

// outboxGauges is what the message gauges read when scraped.
type outboxGauges struct{ n *Node }

func (g outboxGauges) OutboxStats() (int, time.Duration) { return g.n.outboxes.stats(g.n.now()) }
func (g outboxGauges) CrossNodeRatio() float64           { return g.n.traffic.crossRatioAt(g.n.now()) }

// outboxSet is the objects whose outbox held messages when last seen: the
// gauges walk them, not every hosted object.
type outboxSet struct {
	mu sync.Mutex
	m  map[*hosted]struct{}
}

func (s *outboxSet) note(h *hosted) {
	s.mu.Lock()
	if s.m == nil {
		s.m = map[*hosted]struct{}{}
	}
	s.m[h] = struct{}{}
	s.mu.Unlock()
}

// stats is the number of messages in the outboxes of the objects hosted
// here and the age of the oldest; objects gone or emptied leave the set.
func (s *outboxSet) stats(now time.Time) (depth int, oldest time.Duration) {
	s.mu.Lock()
	hs := make([]*hosted, 0, len(s.m))
	for h := range s.m {
		hs = append(hs, h)
	}
	s.mu.Unlock()
	var gone []*hosted
	for _, h := range hs {
		h.mu.Lock()
		l := h.outbox.Len()
		at, ok := h.outbox.Oldest()
		closed := h.closed || h.lost
		h.mu.Unlock()
		if closed || l == 0 {
			gone = append(gone, h)
			continue
		}
		depth += l
		if ok {
			oldest = max(oldest, now.Sub(at))
		}
	}
	s.mu.Lock() // (s.mu, then h.mu: note is never called with h.mu held)
	for _, h := range gone {
		h.mu.Lock()
		if h.outbox.Len() == 0 || h.closed || h.lost {
			delete(s.m, h)
		}
		h.mu.Unlock()
	}
	s.mu.Unlock()
	return depth, oldest
}
