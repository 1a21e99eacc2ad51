package calltrace_test

import (
	"context"
	"os"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshloc/meshloc/pkg/node/calltrace"
	"github.com/meshloc/meshloc/pkg/tracing"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// What tracing off adds to a gateway's and an owner's handling of one call
// (Node.Call's span, the forward's traceparent, the request's trace, the
// histogram's exemplar): nothing allocated, a few nanoseconds.
func BenchmarkOff(b *testing.B) {
	if tracing.On() {
		b.Skip("tracing is on in this process")
	}
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x_seconds"})
	req := &pb.CallRequest{Object: "actor/counter/c", Method: "add"}
	rep := &pb.CallReply{}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c, started := calltrace.Serve(ctx, "n1", req)
		calltrace.Forward(c, req)
		_ = calltrace.Of(c)
		calltrace.End(c, started, rep)
		tracing.Observe(c, h, 0.001)
	}
}

func TestOffAllocatesNothing(t *testing.T) {
	req := &pb.CallRequest{Object: "actor/counter/c", Method: "add"}
	rep := &pb.CallReply{}
	if n := testing.AllocsPerRun(100, func() {
		c, started := calltrace.Serve(context.Background(), "n1", req)
		calltrace.Forward(c, req)
		_ = calltrace.Of(c)
		calltrace.End(c, started, rep)
	}); n != 0 {
		t.Fatalf("tracing off allocates %v times a call", n)
	}
}

// What tracing on adds to a node's handling of a call that is not sampled
// (99 of 100 at a 1 % ratio), the sampler deciding before a span is made
// (tracing.StartSampled): the span sites' cost when they record nothing.
// $MESHLOC_SDK_SPANS set: the SDK makes every span, sampled or not (the
// cost before StartSampled).
func BenchmarkOnUnsampled(b *testing.B) {
	sampler := sdktrace.ParentBased(sdktrace.NeverSample())
	var tp interface {
		trace.TracerProvider
		Shutdown(context.Context) error
	} = tracing.NewProvider(sampler)
	if os.Getenv("MESHLOC_SDK_SPANS") != "" {
		tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler))
	}
	restore := tracing.Use(tp)
	defer func() { restore(); _ = tp.Shutdown(context.Background()) }()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x_seconds"})
	op := wire.NewOperationID()
	req := &pb.CallRequest{Object: "actor/counter/c", Method: "add", OperationId: op[:]}
	rep := &pb.CallReply{}
	ctx := tracing.WithoutParent(context.Background()) // a forward stream's
	b.ReportAllocs()
	for b.Loop() { // an owner's part (a gateway's adds Forward's traceparent)
		c, started := calltrace.Serve(ctx, "n1", req)
		_ = calltrace.Of(c)
		calltrace.End(c, started, rep)
		tracing.Observe(c, h, 0.001)
	}
}

// The sampler decides before a node's span of a call is made: a call it
// drops has no span, and a gateway forwards it with an unsampled
// traceparent (the owner follows); a call it keeps has its span, and the
// traceparent names it; a call whose traceparent is sampled is followed.
// At a ratio of a half, about half the roots are sampled (the SDK, asked
// again, decides the same on the same trace id).
func TestServeSamples(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler
		tp      string
		want    bool
	}{
		{"dropped root", sdktrace.ParentBased(sdktrace.NeverSample()), "", false},
		{"kept root", sdktrace.ParentBased(sdktrace.AlwaysSample()), "", true},
		{"sampled parent", sdktrace.ParentBased(sdktrace.NeverSample()), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"unsampled parent", sdktrace.ParentBased(sdktrace.AlwaysSample()), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			tp := tracing.NewProvider(tc.sampler, sdktrace.WithSyncer(exp))
			restore := tracing.Use(tp)
			defer func() { restore(); _ = tp.Shutdown(context.Background()) }()
			req := &pb.CallRequest{Object: "actor/counter/c", Method: "add", Traceparent: tc.tp}
			ctx, started := calltrace.Serve(tracing.WithoutParent(context.Background()), "gw", req)
			calltrace.Forward(ctx, req)
			calltrace.End(ctx, started, &pb.CallReply{})
			sc, ok := tracing.ParseTraceparent(req.Traceparent)
			switch spans := exp.GetSpans(); {
			case started != tc.want || len(spans) != map[bool]int{false: 0, true: 1}[tc.want]:
				t.Fatalf("started %v, %d spans; want %v", started, len(spans), tc.want)
			case !ok || sc.IsSampled() != tc.want:
				t.Fatalf("forwarded with traceparent %q, want one sampled=%v", req.Traceparent, tc.want)
			case tc.want && sc.SpanID() != spans[0].SpanContext.SpanID():
				t.Fatalf("forwarded under span %s, not the gateway's %s", sc.SpanID(), spans[0].SpanContext.SpanID())
			case tc.tp != "" && sc.TraceID().String() != tc.tp[3:35]:
				t.Fatalf("forwarded in trace %s, not the caller's", sc.TraceID())
			}
		})
	}
	t.Run("ratio", func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := tracing.NewProvider(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.5)), sdktrace.WithSyncer(exp))
		restore := tracing.Use(tp)
		defer func() { restore(); _ = tp.Shutdown(context.Background()) }()
		const n = 4000
		kept := 0
		for range n {
			ctx, started := calltrace.Serve(context.Background(), "n1", &pb.CallRequest{})
			calltrace.End(ctx, started, &pb.CallReply{})
			if started {
				kept++
			}
		}
		if got := len(exp.GetSpans()); got != kept || kept < n*2/5 || kept > n*3/5 {
			t.Fatalf("%d of %d roots kept, %d spans exported: want about half, every one exported", kept, n, got)
		}
	})
}
