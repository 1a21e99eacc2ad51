// Package calltrace is how a node traces the calls it handles: the span of
// a call it received (as a gateway or as the owner), the trace context a
// forwarded call carries on, and the owner's spans of the call's queue
// wait, its execution and its durable write. Every function costs one
// atomic load when tracing is off (pkg/tracing).
package calltrace

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshloc/meshloc/pkg/tracing"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Serve starts node's span of a call it received, a child of the span the
// request's traceparent names (a root when it names none), and returns ctx
// with it: the router then serves the call here or forwards it, under this
// span. A span the sampler drops is not made (tracing.StartSampled):
// started is false, and End ends nothing. Off, it returns ctx and false.
// (A context and a bool, not a span too: every call's serving holds them
// on its goroutine's stack.)
func Serve(ctx context.Context, node string, req *pb.CallRequest) (_ context.Context, started bool) {
	if !tracing.On() {
		return ctx, false
	}
	return serve(ctx, node, req)
}

func serve(ctx context.Context, node string, req *pb.CallRequest) (context.Context, bool) {
	ctx = tracing.WithTraceparent(ctx, req.GetTraceparent())
	ctx, span, started := tracing.StartSampled(ctx, "meshloc.node.call", trace.SpanKindServer)
	if span.IsRecording() { // the attributes only for a sampled call
		span.SetAttributes(attribute.String("meshloc.node", node), attribute.String("meshloc.object", req.GetObject()),
			attribute.String("meshloc.method", req.GetMethod()), attribute.String("meshloc.operation_id", opString(req.GetOperationId())),
			attribute.Int("meshloc.hops", int(req.GetHops())))
	}
	return ctx, started
}

func opString(b []byte) string {
	if id, err := wire.ParseOperationIDBytes(b); err == nil {
		return id.String()
	}
	return ""
}

// End ends the span Serve started (started: Serve's) with the reply's code
// and fence.
func End(ctx context.Context, started bool, rep *pb.CallReply) {
	if !started {
		return
	}
	span := trace.SpanFromContext(ctx)
	Reply(span, rep)
	span.End()
}

// Reply puts rep's code, fence and owner on span; a code other than ok
// marks it failed.
func Reply(span trace.Span, rep *pb.CallReply) {
	if !span.IsRecording() {
		return
	}
	code := wire.CodeName(rep.GetCode())
	span.SetAttributes(attribute.String("meshloc.code", code), attribute.Bool("meshloc.replayed", rep.GetReplayed()))
	if f := rep.GetFence(); f != nil {
		span.SetAttributes(attribute.String("meshloc.owner", f.GetOwnerId()),
			attribute.Int64("meshloc.object_generation", f.GetObjectGeneration()),
			attribute.Int64("meshloc.authority_generation", f.GetAuthorityGeneration()),
			attribute.Int64("meshloc.store_version", f.GetStoreVersion()))
	}
	if rep.GetCode() != pb.Code_CODE_OK {
		tracing.Fail(span, code+": "+rep.GetMessage())
	}
}

// Forward sets the request's traceparent to ctx's span before a gateway
// forwards it: the owner's span is then the gateway's child. A gateway
// whose sampler dropped the call leaves the caller's traceparent as it
// came, or, when the call came with none (the trace's root was here),
// sends a new unsampled one, so that the owner follows the decision. Off,
// it leaves the request as it came.
func Forward(ctx context.Context, req *pb.CallRequest) {
	if tp := tracing.Traceparent(ctx); tp != "" {
		req.Traceparent = tp
	} else if req.GetTraceparent() == "" && tracing.On() {
		req.Traceparent = tracing.Unsampled()
	}
}

// Of is what an owner keeps of ctx's span with a request it queues: the
// span's context when it is sampled, the zero context otherwise.
func Of(ctx context.Context) trace.SpanContext {
	if !tracing.On() {
		return trace.SpanContext{}
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		return sc
	}
	return trace.SpanContext{}
}

// Execute starts the owner's span of a request's execution, a child of
// parent (Of); queued, when not zero, is when the request was queued
// behind others: its wait becomes a span of its own before.
func Execute(parent trace.SpanContext, queued time.Time, node, object string) (context.Context, trace.Span) {
	ctx := trace.ContextWithSpanContext(context.Background(), parent)
	if !queued.IsZero() {
		_, q := tracing.StartAt(ctx, "meshloc.queue", trace.WithTimestamp(queued), trace.WithAttributes(attribute.String("meshloc.node", node)))
		q.End()
	}
	return tracing.StartAt(ctx, "meshloc.execute", trace.WithAttributes(attribute.String("meshloc.node", node), attribute.String("meshloc.object", object)))
}

// Write starts the span of a durable write made with ctx, in the
// execution exec (nil: the request is not traced), to the store named
// store; ctx keeps its deadline and gets the span.
func Write(ctx, exec context.Context, store string) (context.Context, trace.Span) {
	if exec == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	ctx = trace.ContextWithSpan(ctx, trace.SpanFromContext(exec))
	return tracing.StartAt(ctx, "meshloc.state.write", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attribute.String("meshloc.state_store", store)))
}
