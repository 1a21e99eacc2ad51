package locationd

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/meshloc/meshloc/pkg/tracing"
)

// metrics of one Server, registered on its own registry (never the global
// one, so two Servers in one test process do not collide).
type metrics struct {
	requests      *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	eventsDropped prometheus.Counter
	deletes       prometheus.Counter
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshloc_locationd_http_requests_total",
			Help: "HTTP requests answered by locationd, by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "meshloc_locationd_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route pattern.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 9), // 0.5ms … 33s
		}, []string{"route"}),
		eventsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshloc_locationd_event_streams_dropped_total",
			Help: "Event streams (GET /v1/events) closed because their client fell --events-buffer events behind.",
		}),
		deletes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshloc_locationd_deletes_total",
			Help: "Objects deleted by DELETE /v1/objects/{object} (meshctl delete): record, persisted state and replies removed.",
		}),
	}
	reg.MustRegister(
		m.requests,
		m.duration,
		m.eventsDropped,
		m.deletes,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// statusWriter remembers the status code a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// instrument counts and times h under route (the pattern, never the raw path:
// object names would make the label set unbounded).
func (m *metrics) instrument(route string, h http.Handler) http.Handler {
	h = tracing.Handler(route, h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		if sw.code == 0 {
			sw.code = http.StatusOK
		}
		m.requests.WithLabelValues(route, strconv.Itoa(sw.code)).Inc()
		m.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}
