package pacing

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics: background relocations and the run queue they yield to.
type metrics struct {
	runQueueP99    prometheus.Gauge
	backgroundRate prometheus.Gauge
	admissionWait  prometheus.Histogram
	deferred       prometheus.Counter
	waiting        prometheus.Gauge
}

func registerMetrics(reg *prometheus.Registry) *metrics {
	var l prometheus.Labels
	m := &metrics{
		runQueueP99: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshloc_run_queue_wait_p99_seconds",
			Help: "How long runnable goroutines of this process waited for a processor, p99 over the last pacing tick (100 ms).", ConstLabels: l}),
		backgroundRate: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshloc_background_relocation_rate",
			Help: "Units per second at which background relocations may start now (+Inf: not paced); a relocation is one unit and one per MiB of its state.", ConstLabels: l}),
		admissionWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meshloc_background_relocation_wait_seconds",
			Help: "How long background relocations waited for the node's pacing before they started.", ConstLabels: l,
			Buckets: []float64{0.0001, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}}),
		deferred: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_background_relocations_deferred_total",
			Help: "Background relocations that waited for the node's pacing as long as their timeout allowed and did not start.", ConstLabels: l}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshloc_background_relocations_waiting",
			Help: "Background relocations waiting for the node's pacing now.", ConstLabels: l}),
	}
	m.backgroundRate.Set(math.Inf(1))
	reg.MustRegister(m.runQueueP99, m.backgroundRate, m.admissionWait, m.deferred, m.waiting)
	return m
}
