package reloclog

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/tracing"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// relocTrace is one relocation's spans on one node: its root, and the
// timeline step in progress (each step a child span of the root, from its
// mark to the next one's: the spans are the relocation timeline).
type relocTrace struct {
	ctx   context.Context // the root's
	root  trace.Span
	step  trace.Span
	ended bool
}

// Trace starts the relocation's root span on this node, "meshloc.relocate"
// (its role, object, relocation id and the two nodes as attributes), a
// child of parent (Parent; ctx's span when parent is zero): on the source,
// the operator's request or whatever started it; on the target, the
// source's span the relocation stream carried. It returns ctx with the root, which the relocation's I/O runs
// in (its etcd transactions are its children, pkg/authority), and notes
// the trace id in the status (the timeline shows it). Call EndTrace once
// the run is over. Off, it returns ctx and traces nothing.
func (r *Reporter) Trace(ctx context.Context, parent trace.SpanContext, source, target string) context.Context {
	if !tracing.On() {
		return ctx
	}
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	}
	st := r.rec.Snapshot()
	ctx, root := tracing.Start(ctx, "meshloc.relocate", trace.SpanKindInternal,
		attribute.String("meshloc.role", r.role), attribute.String("meshloc.object", st.GetObject()),
		attribute.String("meshloc.relocation_id", IDString(st.GetRelocationId())),
		attribute.String("meshloc.source", source), attribute.String("meshloc.target", target))
	if !root.IsRecording() {
		return ctx // unsampled: the target learns so from the stream
	}
	r.tr = &relocTrace{ctx: ctx, root: root}
	id := tracing.TraceID(ctx)
	r.rec.Set(func(s *pb.RelocationStatus) { s.TraceId = id })
	return ctx
}

// traceStep ends the step in progress at at and starts step.
func (r *Reporter) traceStep(step string, at time.Time) {
	t := r.tr
	if t == nil || t.ended {
		return
	}
	if t.step != nil {
		t.step.End(trace.WithTimestamp(at))
		t.step = nil
	}
	if step == "done" { // the end, not a step
		return
	}
	_, t.step = tracing.StartAt(t.ctx, "meshloc.relocation."+step, trace.WithTimestamp(at),
		trace.WithAttributes(attribute.String("meshloc.role", r.role)))
}

// traceFinish ends the step in progress and the root with the outcome.
func (r *Reporter) traceFinish(f relocation.Finish) {
	t := r.tr
	if t == nil || t.ended {
		return
	}
	now := time.Now()
	if t.step != nil {
		t.step.End(trace.WithTimestamp(now))
	}
	t.root.SetAttributes(attribute.String("meshloc.outcome", f.Outcome.String()))
	if f.Outcome != relocation.Completed {
		tracing.Fail(t.root, f.Outcome.String()+": "+f.Message)
	}
	t.root.End(trace.WithTimestamp(now))
	t.ended = true
}

// EndTrace ends the root if the relocation never finished (it could not
// start: the target unreachable).
func (r *Reporter) EndTrace() {
	if t := r.tr; t != nil && !t.ended {
		if t.step != nil {
			t.step.End()
		}
		tracing.Fail(t.root, "ended unfinished")
		t.root.End()
		t.ended = true
	}
}

// observeInterruption observes d on the interruption histogram, with the
// relocation's trace as its exemplar when it is sampled.
func (r *Reporter) observeInterruption(d time.Duration) {
	ctx := context.Background()
	if r.tr != nil {
		ctx = r.tr.ctx
	}
	tracing.Observe(ctx, r.m.Interruption, d.Seconds())
}

// Parent is the span a relocation started in ctx continues (zero: none,
// or tracing is off).
func Parent(ctx context.Context) trace.SpanContext {
	if !tracing.On() {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(ctx)
}

// BulkTrace starts the span of a bulk move on this node,
// "meshloc.relocate.bulk" (its role, and on the source the objects it
// carries), a child of parent: on the source, the drain's or the request's
// span that made the move; on the target, the source's, which the bulk
// stream carried. The move's I/O runs in the returned ctx, so its etcd
// transactions are the span's children. Off, it returns ctx and a no-op.
func BulkTrace(ctx context.Context, parent trace.SpanContext, role string, objects int) (context.Context, func()) {
	if !tracing.On() {
		return ctx, func() {}
	}
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	}
	ctx, span := tracing.Start(ctx, "meshloc.relocate.bulk", trace.SpanKindInternal,
		attribute.String("meshloc.role", role), attribute.Int("meshloc.objects", objects))
	return ctx, func() { span.End() }
}
