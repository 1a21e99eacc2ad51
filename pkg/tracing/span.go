package tracing

import (
	"context"
	"encoding/hex"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Scope is the instrumentation scope of meshloc's spans.
const Scope = "github.com/meshloc/meshloc"

// on: a tracer provider is installed (Use). Every helper checks it first,
// so that tracing off costs one atomic load.
var on atomic.Bool

// tracerBox is the tracer of the installed provider and, for a Provider,
// its sampler (StartSampled).
type tracerBox struct {
	t       trace.Tracer
	sampler sdktrace.Sampler
}

var tracer atomic.Pointer[tracerBox]

// On says whether tracing is on in this process.
func On() bool { return on.Load() }

// noSpan is what the helpers return when tracing is off.
var noSpan trace.Span = noop.Span{}

// Start starts a span called name, a child of ctx's span (a root without
// one), of the given kind. Off, it returns ctx and a span that records
// nothing.
func Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !on.Load() {
		return ctx, noSpan
	}
	if len(attrs) == 0 {
		return tracer.Load().t.Start(ctx, name, kindOption(kind))
	}
	return tracer.Load().t.Start(ctx, name, kindOption(kind), trace.WithAttributes(attrs...))
}

// kindOptions are the span kinds' start options, made once: a span that is
// not sampled then allocates only what the SDK does.
var kindOptions = func() (o [trace.SpanKindConsumer + 1]trace.SpanStartOption) {
	for k := range o {
		o[k] = trace.WithSpanKind(trace.SpanKind(k))
	}
	return o
}()

func kindOption(k trace.SpanKind) trace.SpanStartOption {
	if k < 0 || int(k) >= len(kindOptions) {
		return kindOptions[trace.SpanKindInternal]
	}
	return kindOptions[k]
}

// StartAt is Start with the span's start time given (a span made after the
// fact, from times recorded while the work ran: a queue wait).
func StartAt(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !on.Load() {
		return ctx, noSpan
	}
	return tracer.Load().t.Start(ctx, name, opts...)
}

// Recording says whether ctx's span records: a sampled trace is being
// followed. It is false whenever tracing is off.
func Recording(ctx context.Context) bool {
	return on.Load() && trace.SpanFromContext(ctx).IsRecording()
}

// Fail marks span failed with msg (a call's error code, a relocation's
// outcome), or does nothing when it does not record.
func Fail(span trace.Span, msg string) {
	if span.IsRecording() {
		span.SetStatus(codes.Error, msg)
	}
}

// Traceparent is the W3C traceparent of ctx's span, to carry in a message;
// "" when tracing is off or ctx has no span.
func Traceparent(ctx context.Context) string {
	if !on.Load() {
		return ""
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return format(sc)
}

// format is sc's version-00 traceparent.
func format(sc trace.SpanContext) string {
	tid, sid := sc.TraceID(), sc.SpanID()
	b := make([]byte, 0, TraceparentLen)
	b = append(b, "00-"...)
	b = hex.AppendEncode(b, tid[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, sid[:])
	if sc.IsSampled() {
		return string(append(b, "-01"...))
	}
	return string(append(b, "-00"...))
}

// TraceparentLen is the length of a version-00 traceparent.
const TraceparentLen = 55

// WithTraceparent is ctx with the remote span a message's traceparent
// names as its parent. Like every W3C receiver, it ignores a traceparent
// that does not parse (wrong length, version, characters, or an all-zero
// id): the work is done all the same, its trace starts here. Off, it
// returns ctx.
func WithTraceparent(ctx context.Context, tp string) context.Context {
	if !on.Load() || tp == "" {
		return ctx
	}
	sc, ok := ParseTraceparent(tp)
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// ParseTraceparent parses a version-00 W3C traceparent, strictly: lower-
// case hex, non-zero ids, flags 00 or 01 (other flag bits are dropped).
func ParseTraceparent(tp string) (trace.SpanContext, bool) {
	if len(tp) != TraceparentLen || tp[:3] != "00-" || tp[35] != '-' || tp[52] != '-' {
		return trace.SpanContext{}, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	var flags [1]byte
	if !lowerHex(tp[3:35]) || !lowerHex(tp[36:52]) || !lowerHex(tp[53:]) {
		return trace.SpanContext{}, false
	}
	if _, err := hex.Decode(tid[:], []byte(tp[3:35])); err != nil {
		return trace.SpanContext{}, false
	}
	if _, err := hex.Decode(sid[:], []byte(tp[36:52])); err != nil {
		return trace.SpanContext{}, false
	}
	if _, err := hex.Decode(flags[:], []byte(tp[53:])); err != nil {
		return trace.SpanContext{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true})
	return sc, sc.IsValid()
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// TraceID is the id of ctx's trace when it is sampled, "" otherwise (what
// meshctl -v prints, and what exemplars carry).
func TraceID(ctx context.Context) string {
	if !on.Load() {
		return ""
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return ""
	}
	return sc.TraceID().String()
}

// Observe observes v on h, with the trace id of ctx's sampled span as the
// observation's exemplar (trace_id): a latency histogram's bucket then
// links to one trace that landed in it. Off, or unsampled, it is
// h.Observe(v).
func Observe(ctx context.Context, h prometheus.Observer, v float64) {
	if id := TraceID(ctx); id != "" {
		if eo, ok := h.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": id})
			return
		}
	}
	h.Observe(v)
}

// WithoutParent is ctx with no span as the parent of the spans started in
// it (while tracing is on; ctx itself when off): for a stream whose
// messages carry their own trace context (a forward stream's calls, each
// with its traceparent). It also spares each span's start the walk to the
// end of a gRPC stream's long chain of context values, looking for a span
// that is not there: a few hundred nanoseconds a call.
func WithoutParent(ctx context.Context) context.Context {
	if !on.Load() {
		return ctx
	}
	return trace.ContextWithSpanContext(ctx, trace.SpanContext{})
}

// Carry is tp when it parses (ParseTraceparent), "" otherwise: what a node
// passes on of a traceparent it received, when it does not trace the work
// itself, so that no malformed or oversized string travels further.
func Carry(tp string) string {
	if tp == "" {
		return ""
	}
	if _, ok := ParseTraceparent(tp); !ok {
		return ""
	}
	return tp
}
