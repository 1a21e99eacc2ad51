package tracing

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// withEnv replaces the process's environment for the test.
func withEnv(t *testing.T, vars map[string]string) {
	prev := env
	env = func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	t.Cleanup(func() { env = prev })
}

// Off unless an endpoint is configured; OTEL_SDK_DISABLED wins; a flag
// wins over its variable; a bad sampler or ratio is ErrConfig.
func TestConfig(t *testing.T) {
	withEnv(t, nil)
	if (Config{}).Enabled() {
		t.Fatal("enabled with nothing configured")
	}
	if !(Config{Endpoint: "http://127.0.0.1:4317"}).Enabled() {
		t.Fatal("an endpoint flag does not enable it")
	}
	withEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"})
	if !(Config{}).Enabled() {
		t.Fatal("OTEL_EXPORTER_OTLP_ENDPOINT does not enable it")
	}
	withEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_SDK_DISABLED": "true"})
	if (Config{}).Enabled() {
		t.Fatal("OTEL_SDK_DISABLED=true does not disable it")
	}
	withEnv(t, map[string]string{"OTEL_TRACES_SAMPLER": "always_off", "OTEL_TRACES_SAMPLER_ARG": "2"})
	if err := (Config{}).Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("a ratio of 2: %v", err)
	}
	if err := (Config{Sampler: "traceidratio", SamplerArg: "0.25"}).Validate(); err != nil {
		t.Fatalf("flags win over the variables: %v", err)
	}
	for _, bad := range []Config{{Sampler: "sometimes"}, {SamplerArg: "-0.1"}, {SamplerArg: "NaN"}, {SamplerArg: "x"}} {
		if err := bad.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", bad, err)
		}
	}
	withEnv(t, nil)
	for _, ok := range []string{"", "always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio", "ParentBased_TraceIDRatio"} {
		if err := (Config{Sampler: ok, SamplerArg: "0.5"}).Validate(); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}

// Off, every helper returns at once: no span, no traceparent, no trace id,
// a plain observation; the context is the caller's.
func TestOff(t *testing.T) {
	ctx := context.Background()
	if c, s := Start(ctx, "x", trace.SpanKindInternal); c != ctx || s.IsRecording() {
		t.Fatal("Start records with tracing off")
	}
	if Traceparent(ctx) != "" || TraceID(ctx) != "" || Recording(ctx) {
		t.Fatal("trace context with tracing off")
	}
	if WithTraceparent(ctx, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01") != ctx {
		t.Fatal("WithTraceparent changed the context with tracing off")
	}
	allocs := testing.AllocsPerRun(100, func() {
		c, s := Start(ctx, "x", trace.SpanKindServer)
		s.End()
		_ = Traceparent(c)
	})
	if allocs != 0 {
		t.Fatalf("tracing off allocates %v times a span site", allocs)
	}
}

// On, a span's traceparent round-trips, its trace id is the exemplar of
// an observation, and the HTTP helpers carry it.
func TestOn(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer Use(tp)()
	ctx, span := Start(context.Background(), "meshloc.test", trace.SpanKindInternal)
	tp0 := Traceparent(ctx)
	if len(tp0) != TraceparentLen || !strings.HasSuffix(tp0, "-01") {
		t.Fatalf("traceparent %q", tp0)
	}
	sc, ok := ParseTraceparent(tp0)
	if !ok || sc.TraceID() != span.SpanContext().TraceID() || sc.SpanID() != span.SpanContext().SpanID() || !sc.IsSampled() {
		t.Fatalf("%q parses to %v %v", tp0, sc, ok)
	}
	child, cs := Start(WithTraceparent(context.Background(), tp0), "meshloc.child", trace.SpanKindServer)
	if cs.SpanContext().TraceID() != span.SpanContext().TraceID() {
		t.Fatal("a span under a traceparent is not in its trace")
	}
	cs.End()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x_seconds", Buckets: []float64{1}})
	Observe(child, h, 0.5)
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	ex := m.GetHistogram().GetBucket()[0].GetExemplar()
	if ex == nil || ex.GetLabel()[0].GetValue() != span.SpanContext().TraceID().String() {
		t.Fatalf("exemplar %v", ex)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://x/", nil)
	InjectHTTP(ctx, req.Header)
	if got := req.Header.Get("traceparent"); got != tp0 {
		t.Fatalf("header %q", got)
	}
	if trace.SpanContextFromContext(FromHTTP(req)).TraceID() != span.SpanContext().TraceID() {
		t.Fatal("FromHTTP lost the trace")
	}
	span.End()
	if n := len(exp.GetSpans()); n != 2 {
		t.Fatalf("%d spans exported, want 2", n)
	}
}

// A traceparent is parsed strictly: anything but a version-00 value of
// lower-case hex with non-zero ids is ignored.
func TestParseTraceparent(t *testing.T) {
	good := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if _, ok := ParseTraceparent(good); !ok {
		t.Fatal(good)
	}
	for _, bad := range []string{"", good + "0", good[:54], "01" + good[2:], strings.ToUpper(good),
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736+00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01"} {
		if _, ok := ParseTraceparent(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	if Carry(good) != good || Carry(good+"0") != "" || Carry(strings.Repeat("a", 1<<16)) != "" {
		t.Error("Carry keeps only a traceparent that parses")
	}
	if sc, ok := ParseTraceparent(good[:53] + "ff"); !ok || !sc.IsSampled() || sc.TraceFlags() != trace.FlagsSampled {
		t.Errorf("unknown flag bits: %v %v", sc, ok)
	}
}

// FuzzTraceparent: a traceparent from the network never panics, and one
// that parses formats back to itself (flags aside).
func FuzzTraceparent(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
	f.Add("ff-ffffffffffffffffffffffffffffffff-ffffffffffffffff-ff")
	f.Fuzz(func(t *testing.T, s string) {
		sc, ok := ParseTraceparent(s)
		if c := Carry(s); (c == s) != (ok || s == "") || (c != s && c != "") {
			t.Fatalf("Carry(%q) = %q (parses: %v)", s, c, ok)
		}
		if !ok {
			return
		}
		if !sc.IsValid() || sc.TraceID().String() != s[3:35] || sc.SpanID().String() != s[36:52] {
			t.Fatalf("%q parsed to %v", s, sc)
		}
	})
}

// The traced gRPC methods: an operator's requests and the relocation
// streams; never the call, watch or session streams.
func TestTracedMethods(t *testing.T) {
	for m, want := range map[string]bool{
		"/meshloc.rpc.v1.AdminService/Relocate":    true,
		"/meshloc.rpc.v1.AdminService/Drain":       true,
		"/meshloc.rpc.v1.AdminService/WatchEvents": false,
		"/meshloc.rpc.v1.PeerService/Relocate":     true,
		"/meshloc.rpc.v1.PeerService/RelocateMany": true,
		"/meshloc.rpc.v1.PeerService/Forward":      false,
		"/meshloc.rpc.v1.CallService/Call":         false,
		"/meshloc.rpc.v1.SessionService/Open":      false,
		"/meshloc.rpc.v1.AdminServiceX/Relocate":   false,
		"/other.v1.AdminService/Relocate":          false,
	} {
		if got := Traced(m); got != want {
			t.Errorf("Traced(%s) = %v, want %v", m, got, want)
		}
	}
}

// A root StartSampled keeps has the trace id its sampler decided on, and
// that id does not stay in the context for a later root to reuse.
func TestStartSampledRootID(t *testing.T) {
	tp := NewProvider(sdktrace.AlwaysSample())
	restore := Use(tp)
	defer func() { restore(); _ = tp.Shutdown(context.Background()) }()
	ctx, span, started := StartSampled(context.Background(), "x", trace.SpanKindServer)
	defer span.End()
	if !started || !span.IsRecording() {
		t.Fatal("an always-sampled root was not started")
	}
	if _, ok := ctx.Value(presetKey{}).(trace.TraceID); ok {
		t.Fatal("the root's preset trace id is in the context returned")
	}
	if tid, _ := (presetIDs{}).NewIDs(ctx); tid == span.SpanContext().TraceID() {
		t.Fatal("a later root would reuse the trace id")
	}
}
