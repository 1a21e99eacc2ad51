// Package tracebench is meshctl bench's tracing section (opt-in: `meshctl
// bench --only tracing`): what OpenTelemetry tracing costs a node's calls.
//
// Four lone nodes run at once, each in a cluster of its own on the same
// etcd (--cluster), so that none forwards to another: two with tracing
// off (no endpoint, the default), one with 1 % of calls sampled
// (--otel-sampler parentbased_traceidratio --otel-sampler-arg 0.01), one
// with every call sampled. Their traces go to an OTLP/gRPC collector this
// process runs (it counts the spans and drops them). The same load, callers
// calling 64 counters through one node, goes to each node in turn, a short
// window at a time, the order turning every round, so that what else the
// machine does falls on all four alike. The figures, each node's calls
// over all its windows:
//
//   - calls/s at 1 % sampling beside calls/s with tracing off (the bound:
//     at least 0.95×);
//   - calls/s with every call sampled, beside the same (printed, no bound);
//   - the second node with tracing off beside the first: the section's
//     noise. A node with tracing off runs the code of a node built without
//     tracing but for one atomic load at each place a span could start
//     (pkg/tracing), so "off" beside a build without tracing is that noise.
//
// The bench's client traces nothing: the node roots each trace, as it does
// for a caller that sends no traceparent.
package tracebench

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/meshloc/meshloc/internal/bench/report"
	"github.com/meshloc/meshloc/pkg/client"
)

// Plan sizes the section; a zero field takes DefaultPlan's.
type Plan struct {
	// Rounds of the four nodes' windows (12).
	Rounds int
	// Window of one node's load (1 s).
	Window time.Duration
	// Callers calling at once (16).
	Callers int
}

// DefaultPlan is the plan meshctl bench runs: about a minute.
func DefaultPlan() Plan { return Plan{Rounds: 12, Window: time.Second, Callers: 16} }

// Env is what the section runs on, from internal/bench.
type Env struct {
	// StartNode starts a meshnode child named name, alone in a cluster of
	// that name (more meshnode flags in args), returns once it serves,
	// with a client that calls through it and stop, which ends it.
	StartNode func(ctx context.Context, name string, args ...string) (cl *client.Client, stop func(), err error)
	// Step reports the start of a step; Base records a baseline, Fig a
	// figure beside the baseline of that name, with its bound.
	Step func(format string, a ...any)
	Base func(report.Measure)
	Fig  func(m report.Measure, baseline string, t *report.Target)
}

// The figures and the baseline of the section, by name.
const (
	off     = "tracing: calls/s, tracing off"
	offB    = "tracing: calls/s, tracing off, a second node (the noise)"
	sampled = "tracing: calls/s, tracing on, 1% of calls sampled"
	all     = "tracing: calls/s, tracing on, every call sampled"
	objects = 64
)

// mode is one node of the section and what its windows counted.
type mode struct {
	name  string
	args  []string
	cl    *client.Client
	calls int64
	time  time.Duration
	spans int64
}

// Run measures the section (a zero field of p: DefaultPlan's).
func Run(ctx context.Context, env Env, p Plan) error {
	def := DefaultPlan()
	p.Rounds, p.Window, p.Callers = cmpOr(p.Rounds, def.Rounds), cmpOr(p.Window, def.Window), cmpOr(p.Callers, def.Callers)
	sink, err := startSink()
	if err != nil {
		return err
	}
	defer sink.stop()
	endpoint := "http://" + sink.addr
	modes := []*mode{
		{name: off},
		{name: sampled, args: []string{"--otel-endpoint", endpoint, "--otel-sampler", "parentbased_traceidratio", "--otel-sampler-arg", "0.01"}},
		{name: all, args: []string{"--otel-endpoint", endpoint, "--otel-sampler", "parentbased_always_on"}},
		{name: offB},
	}
	env.Step("tracing: four lone nodes (tracing off twice, 1%% of calls sampled, every call sampled), %d rounds of a %s window each, %d callers",
		p.Rounds, p.Window, p.Callers)
	for i, m := range modes {
		cl, stop, err := env.StartNode(ctx, "trace"+strconv.Itoa(i), m.args...)
		if err != nil {
			return err
		}
		defer stop()
		m.cl = cl
		for o := range objects { // activated before any window
			if _, err := cl.Call(ctx, obj(o), "add", "1"); err != nil {
				return fmt.Errorf("bench: tracing: %s: %w", obj(o), err)
			}
		}
	}
	for r := range p.Rounds {
		for k := range modes {
			m := modes[(k+r)%len(modes)] // the order turns: no node always goes first
			before := sink.spans.Load()
			n, d, err := window(ctx, m, p)
			if err != nil {
				return err
			}
			m.calls, m.time = m.calls+n, m.time+d
			m.spans += sink.spans.Load() - before // (a batch may land in the next window: counted there)
		}
	}
	rate := func(m *mode) float64 { return float64(m.calls) / m.time.Seconds() }
	env.Base(report.Measure{Name: off, Value: rate(modes[0]), Unit: "calls/s", N: modes[0].calls})
	for _, m := range modes[1:] {
		var t *report.Target
		note := fmt.Sprintf("%d spans received (%.2f a call)", m.spans, float64(m.spans)/float64(max(m.calls, 1)))
		switch m.name {
		case sampled:
			t = report.AtLeast(0.95)
		case offB:
			note = "tracing off, as the baseline's node: the ratio is the section's noise"
		}
		env.Fig(report.Measure{Name: m.name, Value: rate(m), Unit: "calls/s", N: m.calls, Note: note}, off, t)
	}
	return nil
}

// obj is the i-th counter (in turn): the same names on every node, each
// in its own cluster.
func obj(i int) string { return "actor/counter/t" + strconv.Itoa(i%objects) }

// window runs the callers on m's node for p.Window and counts the calls
// they completed.
func window(ctx context.Context, m *mode, p Plan) (int64, time.Duration, error) {
	var n atomic.Int64
	var first error
	var once sync.Once
	wctx, cancel := context.WithTimeout(ctx, p.Window)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for c := range p.Callers {
		wg.Go(func() {
			for i := c; wctx.Err() == nil; i += p.Callers {
				if _, err := m.cl.Call(wctx, obj(i), "add", "1"); err != nil {
					if wctx.Err() == nil {
						once.Do(func() { first = err })
					}
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	if first != nil {
		return 0, 0, fmt.Errorf("bench: tracing: a call: %w", first)
	}
	return n.Load(), d, nil
}

// sink is an OTLP/gRPC trace collector that counts the spans it is sent.
type sink struct {
	coltracepb.UnimplementedTraceServiceServer
	addr  string
	srv   *grpc.Server
	spans atomic.Int64
	done  chan struct{}
}

func startSink() (*sink, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{addr: lis.Addr().String(), srv: grpc.NewServer(), done: make(chan struct{})}
	coltracepb.RegisterTraceServiceServer(s.srv, s)
	go func() { defer close(s.done); _ = s.srv.Serve(lis) }()
	return s, nil
}

func (s *sink) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	var n int64
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += int64(len(ss.GetSpans()))
		}
	}
	s.spans.Add(n)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (s *sink) stop() { s.srv.Stop(); <-s.done }

func cmpOr[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}
