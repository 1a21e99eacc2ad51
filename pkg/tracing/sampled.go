package tracing

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Provider is the SDK's tracer provider as NewProvider makes it: its
// sampler is known, so that StartSampled can ask it first and not make the
// spans it drops.
type Provider struct {
	*sdktrace.TracerProvider
	sampler sdktrace.Sampler
}

// NewProvider is sdktrace.NewTracerProvider(opts...) with sampler, and with
// trace ids StartSampled can choose (a root's id is the one its sampler
// decided on). Setup uses it; a test can too, with an exporter of its own.
func NewProvider(sampler sdktrace.Sampler, opts ...sdktrace.TracerProviderOption) *Provider {
	opts = append(opts, sdktrace.WithSampler(sampler), sdktrace.WithIDGenerator(presetIDs{}))
	return &Provider{TracerProvider: sdktrace.NewTracerProvider(opts...), sampler: sampler}
}

// StartSampled is Start for a span that most often is not sampled (a
// node's span of each call it serves, at a ratio of 1 %, say): with a
// Provider, its sampler decides first, and a span it drops is not made at
// all. Then ctx comes back as it was, with a span that records nothing,
// and started false: there is nothing to end. (The SDK would make a span
// that records nothing and a context holding it, a few hundred
// nanoseconds a call.) With another provider it is Start. Off, it returns
// ctx, a span that records nothing, and false.
func StartSampled(ctx context.Context, name string, kind trace.SpanKind) (_ context.Context, _ trace.Span, started bool) {
	if !on.Load() {
		return ctx, noSpan, false
	}
	box := tracer.Load()
	if box.sampler != nil {
		parent := trace.SpanContextFromContext(ctx)
		tid := parent.TraceID()
		if !tid.IsValid() {
			tid = newTraceID()
		}
		r := box.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: tid, Name: name, Kind: kind})
		if r.Decision == sdktrace.Drop {
			return ctx, noSpan, false
		}
		if !parent.TraceID().IsValid() {
			// The SDK asks the sampler again, with the id presetIDs
			// gives it: this one, so that it decides the same. The id
			// stays out of the context returned, where a new root
			// started later would find it.
			_, span := box.t.Start(context.WithValue(ctx, presetKey{}, tid), name, kindOption(kind))
			return trace.ContextWithSpan(ctx, span), span, true
		}
	}
	ctx, span := box.t.Start(ctx, name, kindOption(kind))
	return ctx, span, true
}

// Unsampled is a traceparent of a new trace that is not sampled: what a
// node that dropped a call's trace at its root (StartSampled) sends with
// the call, so that the next node follows the decision and does not make
// one of its own.
func Unsampled() string {
	tid, sid := newTraceID(), newSpanID()
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})
	return format(sc)
}

// presetIDs are the SDK's random ids, but for a root's trace id that
// StartSampled chose (in ctx).
type presetIDs struct{}

type presetKey struct{}

func (presetIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if tid, ok := ctx.Value(presetKey{}).(trace.TraceID); ok {
		return tid, newSpanID()
	}
	return newTraceID(), newSpanID()
}

func (presetIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return newSpanID() }

func newTraceID() (tid trace.TraceID) {
	for !tid.IsValid() {
		binary.NativeEndian.PutUint64(tid[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid
}

func newSpanID() (sid trace.SpanID) {
	for !sid.IsValid() {
		binary.NativeEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}
