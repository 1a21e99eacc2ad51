package hosted

import (
	"sync"
	"time"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"

	"github.com/meshloc/meshloc/pkg/actor"
)

// countAnswer counts one applied answer of h's: delivered (local or
// remote) or refused, its latency, and its edge in the traffic sketch.
func (n *Env) countAnswer(h *Object, a messageAnswer, now time.Time) {
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
		n.traffic.Observe(now, h.name, a.msg.To, !local)
	}
}

// OutboxSet is the objects whose outbox held messages when last seen: the
// gauges walk them, not every hosted object.
type OutboxSet struct {
	mu sync.Mutex
	m  map[*Object]struct{}
}

func (s *OutboxSet) Note(h *Object) {
	s.mu.Lock()
	if s.m == nil {
		s.m = map[*Object]struct{}{}
	}
	s.m[h] = struct{}{}
	s.mu.Unlock()
}

// Stats is the number of messages in the outboxes of the objects hosted
// here and the age of the oldest; objects gone or emptied leave the set.
func (s *OutboxSet) Stats(now time.Time) (depth int, oldest time.Duration) {
	s.mu.Lock()
	hs := make([]*Object, 0, len(s.m))
	for h := range s.m {
		hs = append(hs, h)
	}
	s.mu.Unlock()
	var gone []*Object
	for _, h := range hs {
		h.Mu.Lock()
		l := h.Outbox.Len()
		at, ok := h.Outbox.Oldest()
		closed := h.Closed || h.Lost
		h.Mu.Unlock()
		if closed || l == 0 {
			gone = append(gone, h)
			continue
		}
		depth += l
		if ok {
			oldest = max(oldest, now.Sub(at))
		}
	}
	s.mu.Lock() // (s.mu, then h.Mu: note is never called with h.Mu held)
	for _, h := range gone {
		h.Mu.Lock()
		if h.Outbox.Len() == 0 || h.Closed || h.Lost {
			delete(s.m, h)
		}
		h.Mu.Unlock()
	}
	s.mu.Unlock()
	return depth, oldest
}
