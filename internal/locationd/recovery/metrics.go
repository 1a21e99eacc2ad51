package recovery

import "github.com/prometheus/client_golang/prometheus"

// Outcomes of a recovery attempt (meshloc_locationd_recoveries_total{outcome}).
const (
	OutcomeRecovered = "recovered" // re-activated on a live node
	OutcomeRaced     = "raced"     // the record moved, or its owner is alive: nothing to do
	OutcomeNoTarget  = "no_target" // no serving node with weight > 0 hosts its type(s)
	OutcomeFailed    = "failed"    // etcd did not answer, or the outcome is uncertain (retried later)
)

// Metrics of the recovery controller, registered on one registry.
type Metrics struct {
	leader     prometheus.Gauge
	orphans    prometheus.Gauge
	recoveries *prometheus.CounterVec
	requests   prometheus.Counter
}

// NewMetrics registers the controller's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "meshloc_locationd_controller_leader",
			Help:        "1 while this locationd leads the controller's election, else 0.",
			ConstLabels: prometheus.Labels{"controller": Name},
		}),
		orphans: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshloc_locationd_orphaned_objects",
			Help: "Objects whose owner is gone, as the leading recovery controller sees them (0 on a locationd that does not lead).",
		}),
		recoveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshloc_locationd_recoveries_total",
			Help: "Recovery attempts of orphaned objects by this locationd's recovery controller, by outcome (recovered, raced, no_target, failed).",
		}, []string{"outcome"}),
		requests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshloc_locationd_recovery_requests_total",
			Help: "etcd write requests that carried this locationd's recoveries: each carries many (nested transactions), so recoveries_total{outcome} over this is how many shared one.",
		}),
	}
	for _, o := range []string{OutcomeRecovered, OutcomeRaced, OutcomeNoTarget, OutcomeFailed} {
		m.recoveries.WithLabelValues(o)
	}
	reg.MustRegister(m.leader, m.orphans, m.recoveries, m.requests)
	return m
}
