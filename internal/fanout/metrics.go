package fanout

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	clients  prometheus.Gauge
	upstream prometheus.Gauge
	catchups prometheus.Counter
	slow     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		clients: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshloc_fanout_client_watchers",
			Help: "Watches the fan-out serves to its clients."}),
		upstream: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshloc_fanout_upstream_watchers",
			Help: "Watches the fan-out keeps open on etcd: one per served range in use, plus catch-ups."}),
		catchups: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_fanout_catchups_total",
			Help: "Client watches that started behind the history and caught up on a watch of their own."}),
		slow: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshloc_fanout_slow_clients_total",
			Help: "Client streams closed because their queue of responses was full."}),
	}
	if reg != nil {
		reg.MustRegister(m.clients, m.upstream, m.catchups, m.slow)
	}
	return m
}
