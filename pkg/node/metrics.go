package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshloc/meshloc/pkg/node/durable"
)

type metrics struct {
	reg             *prometheus.Registry
	calls           *prometheus.CounterVec
	callSeconds     prometheus.Histogram
	forwards        prometheus.Counter
	forwardStreams  prometheus.Gauge
	hosted          prometheus.Gauge
	activations     prometheus.Counter
	recoveries      prometheus.Counter
	replayed        prometheus.Counter
	staleRefused    prometheus.Counter
	fencedRefusals  prometheus.Counter
	dedupHits       prometheus.Counter
	relocations     *prometheus.CounterVec
	plans           *prometheus.CounterVec
	panics          prometheus.Counter
	interruption    prometheus.Histogram
	bytes           prometheus.Counter
	chunks          prometheus.Counter
	relayed         *prometheus.CounterVec
	lateFrames      prometheus.Counter
	execLogErrors   prometheus.Counter
	ownershipLost   prometheus.Counter
	stagesRefused   *prometheus.CounterVec
	durable         *durable.Metrics
	drained         *prometheus.CounterVec // drain.go
	messages        *messageMetrics        // message_metrics.go
	*sessionMetrics                        // session_*.go
}

// sessionMetrics: sessions, at gateways and at object owners.
type sessionMetrics struct {
	sessionsOpen    prometheus.Gauge
	sessionsOpened  *prometheus.CounterVec
	sessionsClosed  *prometheus.CounterVec
	sessionsBound   *prometheus.CounterVec
	sessionsSealed  *prometheus.CounterVec
	sessionsRouted  *prometheus.CounterVec
	sessionsDropped prometheus.Counter
	sessionPushes   prometheus.Counter
	sessionBuffered prometheus.Counter
}

func registerSessionMetrics(reg *prometheus.Registry, l prometheus.Labels) *sessionMetrics {
	m := &sessionMetrics{
		sessionsOpen: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshloc_sessions_open", Help: "Sessions held by this node as their gateway.", ConstLabels: l}),
		sessionsOpened: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_sessions_opened_total", Help: "Sessions opened at this gateway, new or resumed.", ConstLabels: l},
			[]string{"how"}),
		sessionsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_sessions_closed_total", Help: "Sessions that ended at this gateway, by code.", ConstLabels: l},
			[]string{"code"}),
		sessionsBound: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_session_binds_total", Help: "Sessions bound to an object of this node: new, or again (a resume, another gateway).", ConstLabels: l},
			[]string{"how"}),
		sessionsSealed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_session_seals_total", Help: "Seals of sessions asked by this node before a move, by answer.", ConstLabels: l},
			[]string{"code"}),
		sessionsRouted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_session_routes_total", Help: "Routes of sessions sent by this node after a move (commit) or an abort, by answer.", ConstLabels: l},
			[]string{"code"}),
		sessionsDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_sessions_dropped_total", Help: "Sessions unbound because their client fell behind the push backlog bound.", ConstLabels: l}),
		sessionPushes:   prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_session_pushes_delivered_total", Help: "Pushes delivered by this node to gateways.", ConstLabels: l}),
		sessionBuffered: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_session_calls_buffered_total", Help: "Session calls kept at this gateway while their object moved.", ConstLabels: l}),
	}
	reg.MustRegister(m.sessionsOpen, m.sessionsOpened, m.sessionsClosed, m.sessionsBound, m.sessionsSealed, m.sessionsRouted, m.sessionsDropped, m.sessionPushes, m.sessionBuffered)
	return m
}

// newMetrics registers the node's metrics on reg. They carry no label
// naming the node: a registry is one node's (New makes one per node), and
// the scraper's target labels (instance, job) tell nodes apart.
func newMetrics(reg *prometheus.Registry) *metrics {
	var l prometheus.Labels
	m := &metrics{
		reg: reg,
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_calls_total", Help: "Calls answered by this node, by code.", ConstLabels: l},
			[]string{"code"}),
		callSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meshloc_call_seconds", Help: "Time to answer a call on this node (routing included).",
			ConstLabels: l, Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18)}),
		forwards:       prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_forwards_total", Help: "Calls forwarded to another node.", ConstLabels: l}),
		forwardStreams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshloc_forward_streams", Help: "Streams of calls this node serves: gateways' forward streams and clients' call streams (one per connection).", ConstLabels: l}),
		hosted:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshloc_hosted_objects", Help: "Objects hosted on this node.", ConstLabels: l}),
		activations:    prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_activations_total", Help: "Objects activated on this node.", ConstLabels: l}),
		recoveries:     prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_recoveries_total", Help: "Orphaned objects re-created on this node (state lost).", ConstLabels: l}),
		dedupHits:      prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_dedup_hits_total", Help: "Retried operations answered from the de-duplication table.", ConstLabels: l}),
		replayed:       prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_relocation_requests_replayed_total", Help: "Captured and DATA requests executed on this node as a relocation target.", ConstLabels: l}),
		relocations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_relocations_total", Help: "Relocations by role and outcome (the first outcome recorded wins).", ConstLabels: l},
			[]string{"role", "outcome"}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_object_panics_total", Help: "Panics of objects' code (handlers, timers, answers, snapshots, restores), each answered as that call's internal error.", ConstLabels: l}),
		plans: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_relocation_plans_total", Help: "Relocations started, by where the record they plan from came from: cache (the one the object serves under, no later write seen) or etcd (read).", ConstLabels: l},
			[]string{"from"}),
		interruption: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meshloc_relocation_interruption_seconds", Help: "From the seal on the source to the target's admission (OUTCOME received).",
			ConstLabels: l, Buckets: prometheus.ExponentialBuckets(100e-6, 2, 18)}),
		bytes:          prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_relocation_bytes_total", Help: "STATE bytes streamed as a source.", ConstLabels: l}),
		chunks:         prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_relocation_chunks_total", Help: "STATE chunks streamed as a source.", ConstLabels: l}),
		relayed:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_replies_relayed_total", Help: "Replies of relocated requests relayed to their requesters, by acknowledgement.", ConstLabels: l}, []string{"ack"}),
		lateFrames:     prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_relocation_late_frames_total", Help: "Frames for finished (tombstoned) or unknown relocation stages, ignored.", ConstLabels: l}),
		staleRefused:   prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_stale_fences_refused_total", Help: "Replies refused because their fence was older than one already seen.", ConstLabels: l}),
		fencedRefusals: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_fenced_refusals_total", Help: "Requests refused because this owner could not confirm its lease.", ConstLabels: l}),
		execLogErrors:  prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_exec_log_errors_total", Help: "Execution log (--exec-log) lines that could not be written.", ConstLabels: l}),
		ownershipLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_ownership_lost_total",
			Help: "Hosted objects fenced and dropped because their record in etcd named another owner or object generation without a relocation of this node committing it.", ConstLabels: l}),
		stagesRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_relocation_stages_refused_total",
			Help: "Incoming relocation stages refused before anything was staged, by the bound reached.", ConstLabels: l}, []string{"reason"}),
	}
	reg.MustRegister(m.calls, m.callSeconds, m.forwards, m.forwardStreams, m.hosted, m.activations, m.recoveries, m.replayed, m.staleRefused, m.fencedRefusals,
		m.dedupHits, m.relocations, m.plans, m.panics, m.interruption, m.bytes, m.chunks, m.relayed, m.lateFrames, m.execLogErrors, m.ownershipLost, m.stagesRefused)
	m.durable = durable.RegisterMetrics(reg)
	m.drained = registerDrainMetrics(reg, l)
	m.sessionMetrics = registerSessionMetrics(reg, l)
	return m
}
