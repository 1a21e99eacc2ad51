package node

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshloc/meshloc/pkg/actor"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// messageMetrics: messages between objects, at their senders.
type messageMetrics struct {
	sent         prometheus.Counter
	delivered    *prometheus.CounterVec // path: local, remote
	retried      prometheus.Counter
	refused      prometheus.Counter
	full         prometheus.Counter
	staleSenders prometheus.Counter
	latency      prometheus.Histogram
}

func registerMessageMetrics(reg *prometheus.Registry, l prometheus.Labels, n *Node) *messageMetrics {
	m := &messageMetrics{
		sent: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_messages_sent_total",
			Help: "Messages recorded in the outboxes of objects hosted here (Send, Ask).", ConstLabels: l}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_messages_delivered_total",
			Help: "Messages whose destination answered (executed, or refused for good before running), by path: local (the destination was served by this node) or remote.", ConstLabels: l},
			[]string{"path"}),
		retried: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_messages_retried_total",
			Help: "Delivery attempts answered with a retryable refusal (not the owner, moving, unavailable, ...): the message goes again with the same id.", ConstLabels: l}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_messages_refused_total",
			Help: "Messages refused as expired (no answer within the de-duplication window): never delivered again; an Ask's OnReply got actor.ErrMessageExpired.", ConstLabels: l}),
		full: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_outbox_full_total",
			Help: "Sends refused because the object's outbox was at its bound (--outbox-messages, --outbox-bytes).", ConstLabels: l}),
		staleSenders: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_messages_stale_sender_total",
			Help: "Messages refused here because their sender had been re-created under a newer object generation.", ConstLabels: l}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meshloc_message_delivery_seconds",
			Help: "From a message's id time (the operation that caused it) to its answer applied at the sender.", ConstLabels: l,
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 20)}),
	}
	depth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "meshloc_outbox_messages",
		Help: "Messages in the outboxes of the objects hosted here, not yet answered.", ConstLabels: l},
		func() float64 { d, _ := n.outboxes.stats(n.now()); return float64(d) })
	age := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "meshloc_outbox_oldest_age_seconds",
		Help: "Age of the oldest unanswered message in an outbox here (from its id time), 0 when none.", ConstLabels: l},
		func() float64 { _, a := n.outboxes.stats(n.now()); return a.Seconds() })
	cross := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "meshloc_messages_cross_node_ratio",
		Help: "Of the messages answered recently (the traffic sketch's decayed counts), the fraction whose destination was served by another node.", ConstLabels: l},
		func() float64 { return n.traffic.crossRatioAt(n.now()) })
	reg.MustRegister(m.sent, m.delivered, m.retried, m.refused, m.full, m.staleSenders, m.latency, depth, age, cross)
	return m
}

// countAnswer counts one applied answer of h's: delivered (local or
// remote) or refused, its latency, and its edge in the traffic sketch.
func (n *Node) countAnswer(h *hosted, a messageAnswer, now time.Time) {
	m := n.metrics.messages
	m.latency.Observe(max(now.Sub(a.msg.ID.Time()), 0).Seconds())
	if a.outcome == actor.OutcomeRefused {
		m.refused.Inc()
		return
	}
	f := a.reply.GetFence()
	local := f != nil && f.GetOwnerId() == n.self.ID && f.GetOwnerGeneration() == n.self.Generation
	path := "remote"
	if local {
		path = "local"
	}
	m.delivered.WithLabelValues(path).Inc()
	if f != nil && a.reply.GetCode() != pb.Code_CODE_UNSPECIFIED {
		n.traffic.observe(now, h.name, a.msg.To, !local)
	}
}

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
