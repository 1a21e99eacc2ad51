// Package nodemetrics owns the Prometheus metrics of one meshnode: their
// names, help texts and buckets, registered on the node's own registry
// (docs/reference/metrics.md is generated from them). The node and its
// capability packages count in them; nothing here decides anything.
package nodemetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/meshloc/meshloc/pkg/node/durable"
)

// Outboxes is what the message gauges read when scraped: the messages in
// the outboxes of the objects hosted here, the oldest one's age, and the
// fraction of recently answered messages that crossed nodes.
type Outboxes interface {
	OutboxStats() (depth int, oldest time.Duration)
	CrossNodeRatio() float64
}

// Node is the metrics of one node, registered on its own registry.
type Node struct {
	Reg            *prometheus.Registry
	Calls          *prometheus.CounterVec
	CallSeconds    prometheus.Histogram
	Forwards       prometheus.Counter
	ForwardStreams prometheus.Gauge
	Hosted         prometheus.Gauge
	Activations    prometheus.Counter
	Recoveries     prometheus.Counter
	Replayed       prometheus.Counter
	StaleRefused   prometheus.Counter
	FencedRefusals prometheus.Counter
	DedupHits      prometheus.Counter
	Relocations    *prometheus.CounterVec
	Plans          *prometheus.CounterVec
	Panics         prometheus.Counter
	Interruption   prometheus.Histogram
	Bytes          prometheus.Counter
	Chunks         prometheus.Counter
	Relayed        *prometheus.CounterVec
	LateFrames     prometheus.Counter
	ExecLogErrors  prometheus.Counter
	OwnershipLost  prometheus.Counter
	StagesRefused  *prometheus.CounterVec
	JoinCleanups   *prometheus.CounterVec
	Durable        *durable.Metrics
	Drained        *prometheus.CounterVec
	Messages       *Messages
	Lifecycle      *Lifecycle
	*Sessions
}

// Lifecycle: objects put to sleep, woken and deleted
// (docs/developing/lifecycle.md).
type Lifecycle struct {
	Sleeps  *prometheus.CounterVec // outcome: slept, raced, failed
	Wakes   prometheus.Counter
	Deletes *prometheus.CounterVec // how: ended, dropped, failed
	// Memory limits: objects put to sleep over the soft bound, new objects
	// refused at the hard bound, and whether the node is full now.
	Shed     prometheus.Counter
	Refusals prometheus.Counter
	Full     prometheus.Gauge
	// Reminders: firings run by objects hosted here (outcome) and how
	// late; schedule entries this node fired, by what the answer meant.
	ReminderFirings  *prometheus.CounterVec // outcome: ok, error, panicked
	ReminderLateness prometheus.Histogram
	ReminderSends    *prometheus.CounterVec // result: fired, gone, expired, retry
}

func registerLifecycle(reg *prometheus.Registry, l prometheus.Labels) *Lifecycle {
	m := &Lifecycle{
		Sleeps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_sleeps_total",
			Help: "Idle objects this node tried to put to sleep, by outcome: slept, raced (a request, a move or a write came first: still awake), failed (etcd left the outcome unknown: dropped from memory, and its next call finds in etcd whether it sleeps).", ConstLabels: l},
			[]string{"outcome"}),
		Wakes: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_wakes_total", Help: "Sleeping objects woken on this node by a call.", ConstLabels: l}),
		Deletes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_deletes_total",
			Help: "Objects hosted here that were deleted, by how: ended (the object's own request called Context.Delete), dropped (its record was deleted from outside, by meshctl delete or the API, and this node dropped the instance), failed (its own request asked it, and the delete was not written: the record changed first, or etcd left the outcome unknown).", ConstLabels: l},
			[]string{"how"}),
	}
	m.Shed = prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_pressure_sleeps_total", ConstLabels: l,
		Help: "Objects this node chose to put to sleep because it was over 90% of --max-objects or --memory-limit (least recently used first; each sleep's outcome is in meshloc_sleeps_total)."})
	m.Refusals = prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_activation_refusals_total", ConstLabels: l,
		Help: "New objects (first calls, wakes, recoveries) this node refused because it was at --max-objects or --memory-limit; the callers retried on another node."})
	m.Full = prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshloc_node_full", ConstLabels: l,
		Help: "1 while this node is at --max-objects or --memory-limit (its owner descriptor says full: placement passes it by), 0 otherwise."})
	m.ReminderFirings = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_reminder_firings_total", ConstLabels: l,
		Help: "Reminder due times fired by objects hosted here (each due time runs OnReminder once), by outcome: ok, error (OnReminder returned an error: logged, the firing counts as done), panicked (not persisted: fired again)."},
		[]string{"outcome"})
	m.ReminderLateness = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meshloc_reminder_lateness_seconds", ConstLabels: l,
		Help:    "How long after its due time a reminder firing ran, on the node that ran it.",
		Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}})
	m.ReminderSends = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_reminder_sends_total", ConstLabels: l,
		Help: "Reminder firings this node sent as the primary or backup of a schedule shard, by what the answer meant: fired (the entry advanced to its next due time or was removed), replayed (it had run before: the entry, if still there, removed), gone (the reminder was cancelled, set again or its object deleted: the entry removed), expired (too late for the de-duplication window: re-based and sent again), retry (not decided: sent again later under the same operation id)."},
		[]string{"result"})
	reg.MustRegister(m.Sleeps, m.Wakes, m.Deletes, m.Shed, m.Refusals, m.Full, m.ReminderFirings, m.ReminderLateness, m.ReminderSends)
	return m
}

// Sessions: sessions, at gateways and at object owners.
type Sessions struct {
	SessionsOpen    prometheus.Gauge
	SessionsOpened  *prometheus.CounterVec
	SessionsClosed  *prometheus.CounterVec
	SessionsBound   *prometheus.CounterVec
	SessionsSealed  *prometheus.CounterVec
	SessionsRouted  *prometheus.CounterVec
	SessionsDropped prometheus.Counter
	SessionPushes   prometheus.Counter
	SessionBuffered prometheus.Counter
}

func registerSessions(reg *prometheus.Registry, l prometheus.Labels) *Sessions {
	m := &Sessions{
		SessionsOpen: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshloc_sessions_open", Help: "Sessions held by this node as their gateway.", ConstLabels: l}),
		SessionsOpened: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_sessions_opened_total", Help: "Sessions opened at this gateway, new or resumed.", ConstLabels: l},
			[]string{"how"}),
		SessionsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_sessions_closed_total", Help: "Sessions that ended at this gateway, by code.", ConstLabels: l},
			[]string{"code"}),
		SessionsBound: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_session_binds_total", Help: "Sessions bound to an object of this node: new, or again (a resume, another gateway).", ConstLabels: l},
			[]string{"how"}),
		SessionsSealed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_session_seals_total", Help: "Seals of sessions asked by this node before a move, by answer.", ConstLabels: l},
			[]string{"code"}),
		SessionsRouted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_session_routes_total", Help: "Routes of sessions sent by this node after a move (commit) or an abort, by answer.", ConstLabels: l},
			[]string{"code"}),
		SessionsDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_sessions_dropped_total", Help: "Sessions unbound because their client fell behind the push backlog bound.", ConstLabels: l}),
		SessionPushes:   prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_session_pushes_delivered_total", Help: "Pushes delivered by this node to gateways.", ConstLabels: l}),
		SessionBuffered: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_session_calls_buffered_total", Help: "Session calls kept at this gateway while their object moved.", ConstLabels: l}),
	}
	reg.MustRegister(m.SessionsOpen, m.SessionsOpened, m.SessionsClosed, m.SessionsBound, m.SessionsSealed, m.SessionsRouted, m.SessionsDropped, m.SessionPushes, m.SessionBuffered)
	return m
}

// New registers the node's metrics on reg. They carry no label
// naming the node: a registry is one node's (New makes one per node), and
// the scraper's target labels (instance, job) tell nodes apart.
func New(reg *prometheus.Registry) *Node {
	var l prometheus.Labels
	m := &Node{
		Reg: reg,
		Calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_calls_total", Help: "Calls answered by this node, by code.", ConstLabels: l},
			[]string{"code"}),
		CallSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meshloc_call_seconds", Help: "Time to answer a call on this node (routing included).",
			ConstLabels: l, Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18)}),
		Forwards:       prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_forwards_total", Help: "Calls forwarded to another node.", ConstLabels: l}),
		ForwardStreams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshloc_forward_streams", Help: "Streams of calls this node serves: gateways' forward streams and clients' call streams (one per connection).", ConstLabels: l}),
		Hosted:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshloc_hosted_objects", Help: "Objects hosted on this node.", ConstLabels: l}),
		Activations:    prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_activations_total", Help: "Objects activated on this node.", ConstLabels: l}),
		Recoveries:     prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_recoveries_total", Help: "Orphaned objects re-created on this node (state lost).", ConstLabels: l}),
		DedupHits:      prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_dedup_hits_total", Help: "Retried operations answered from the de-duplication table.", ConstLabels: l}),
		Replayed:       prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_relocation_requests_replayed_total", Help: "Captured and DATA requests executed on this node as a relocation target.", ConstLabels: l}),
		Relocations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_relocations_total", Help: "Relocations by role and outcome (the first outcome recorded wins).", ConstLabels: l},
			[]string{"role", "outcome"}),
		Panics: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_object_panics_total", Help: "Panics of objects' code (handlers, timers, answers, snapshots, restores), each answered as that call's internal error.", ConstLabels: l}),
		Plans: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_relocation_plans_total", Help: "Relocations started, by where the record they plan from came from: cache (the one the object serves under, no later write seen) or etcd (read).", ConstLabels: l},
			[]string{"from"}),
		Interruption: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meshloc_relocation_interruption_seconds", Help: "From the seal on the source to the target's admission (OUTCOME received).",
			ConstLabels: l, Buckets: prometheus.ExponentialBuckets(100e-6, 2, 18)}),
		Bytes:          prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_relocation_bytes_total", Help: "STATE bytes streamed as a source.", ConstLabels: l}),
		Chunks:         prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_relocation_chunks_total", Help: "STATE chunks streamed as a source.", ConstLabels: l}),
		Relayed:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_replies_relayed_total", Help: "Replies of relocated requests relayed to their requesters, by acknowledgement.", ConstLabels: l}, []string{"ack"}),
		LateFrames:     prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_relocation_late_frames_total", Help: "Frames for finished (tombstoned) or unknown relocation stages, ignored.", ConstLabels: l}),
		StaleRefused:   prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_stale_fences_refused_total", Help: "Replies refused because their fence was older than one already seen.", ConstLabels: l}),
		FencedRefusals: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_fenced_refusals_total", Help: "Requests refused because this owner could not confirm its lease.", ConstLabels: l}),
		ExecLogErrors:  prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_exec_log_errors_total", Help: "Execution log (--exec-log) lines that could not be written.", ConstLabels: l}),
		OwnershipLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_ownership_lost_total",
			Help: "Hosted objects fenced and dropped because their record in etcd named another owner or object generation without a relocation of this node committing it.", ConstLabels: l}),
		StagesRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_relocation_stages_refused_total",
			Help: "Incoming relocation stages refused before anything was staged, by the bound reached.", ConstLabels: l}, []string{"reason"}),
		JoinCleanups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_join_cleanups_total",
			Help: "Actor Join source clean-ups retired on this node (exactly one per join), by the relocation's outcome.", ConstLabels: l}, []string{"outcome"}),
	}
	reg.MustRegister(m.Calls, m.CallSeconds, m.Forwards, m.ForwardStreams, m.Hosted, m.Activations, m.Recoveries, m.Replayed, m.StaleRefused, m.FencedRefusals,
		m.DedupHits, m.Relocations, m.Plans, m.Panics, m.Interruption, m.Bytes, m.Chunks, m.Relayed, m.LateFrames, m.ExecLogErrors, m.OwnershipLost, m.StagesRefused, m.JoinCleanups)
	m.Durable = durable.RegisterMetrics(reg)
	m.Drained = registerDrain(reg, l)
	m.Sessions = registerSessions(reg, l)
	m.Lifecycle = registerLifecycle(reg, l)
	return m
}

// Messages: messages between objects, at their senders.
type Messages struct {
	Sent         prometheus.Counter
	Delivered    *prometheus.CounterVec // path: local, remote
	Retried      prometheus.Counter
	Refused      prometheus.Counter
	Full         prometheus.Counter
	StaleSenders prometheus.Counter
	Latency      prometheus.Histogram
}

// RegisterMessages registers the metrics of messages between objects;
// their gauges read o when scraped.
func RegisterMessages(reg *prometheus.Registry, l prometheus.Labels, o Outboxes) *Messages {
	m := &Messages{
		Sent: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_messages_sent_total",
			Help: "Messages recorded in the outboxes of objects hosted here (Send, Ask).", ConstLabels: l}),
		Delivered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_messages_delivered_total",
			Help: "Messages whose destination answered (executed, or refused for good before running), by path: local (the destination was served by this node) or remote.", ConstLabels: l},
			[]string{"path"}),
		Retried: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_messages_retried_total",
			Help: "Delivery attempts answered with a retryable refusal (not the owner, moving, unavailable, ...): the message goes again with the same id.", ConstLabels: l}),
		Refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_messages_refused_total",
			Help: "Messages refused as expired (no answer within the de-duplication window): never delivered again; an Ask's OnReply got actor.ErrMessageExpired.", ConstLabels: l}),
		Full: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_outbox_full_total",
			Help: "Sends refused because the object's outbox was at its bound (--outbox-messages, --outbox-bytes).", ConstLabels: l}),
		StaleSenders: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_messages_stale_sender_total",
			Help: "Messages refused here because their sender had been re-created under a newer object generation.", ConstLabels: l}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meshloc_message_delivery_seconds",
			Help: "From a message's id time (the operation that caused it) to its answer applied at the sender.", ConstLabels: l,
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 20)}),
	}
	depth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "meshloc_outbox_messages",
		Help: "Messages in the outboxes of the objects hosted here, not yet answered.", ConstLabels: l},
		func() float64 { d, _ := o.OutboxStats(); return float64(d) })
	age := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "meshloc_outbox_oldest_age_seconds",
		Help: "Age of the oldest unanswered message in an outbox here (from its id time), 0 when none.", ConstLabels: l},
		func() float64 { _, a := o.OutboxStats(); return a.Seconds() })
	cross := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "meshloc_messages_cross_node_ratio",
		Help: "Of the messages answered recently (the traffic sketch's decayed counts), the fraction whose destination was served by another node.", ConstLabels: l},
		o.CrossNodeRatio)
	reg.MustRegister(m.Sent, m.Delivered, m.Retried, m.Refused, m.Full, m.StaleSenders, m.Latency, depth, age, cross)
	return m
}

func registerDrain(reg *prometheus.Registry, l prometheus.Labels) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_drain_objects_total",
		Help:        "Objects handled by drains of this node, by outcome: moved, failed (lost when the node stops), retried (an attempt that did not move it).",
		ConstLabels: l}, []string{"outcome"})
	for _, o := range []string{"moved", "failed", "retried"} {
		c.WithLabelValues(o)
	}
	reg.MustRegister(c)
	return c
}

// Sum adds up every series of counter c.
func Sum(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 32)
	go func() { c.Collect(ch); close(ch) }()
	var sum float64
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) == nil && d.GetCounter() != nil {
			sum += d.GetCounter().GetValue()
		}
	}
	return sum
}

// EtcdAlarms registers meshloc_etcd_alarm, every alarm type at 0.
func EtcdAlarms(reg *prometheus.Registry, types []string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meshloc_etcd_alarm",
		Help: "1 while etcd has an alarm of this type raised (NOSPACE: out of space, every write refused; CORRUPT), as this process last read etcd's alarm list."},
		[]string{"type"})
	for _, t := range types {
		g.WithLabelValues(t).Set(0)
	}
	reg.MustRegister(g)
	return g
}
