package recovery

import (
	"context"
	"maps"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshloc/meshloc/pkg/tracing"
)

// tracePass starts the span of one pass over the orphans,
// "meshloc.recover": the root of a trace of its own (what caused it is a
// node's lease ending, which no trace holds), with the orphans it goes
// over. Its steps are its children, and their etcd writes theirs. Off,
// it returns ctx and a no-op.
func tracePass(ctx context.Context, orphans int) (context.Context, func()) {
	if !tracing.On() || orphans == 0 {
		return ctx, func() {}
	}
	ctx, span := tracing.Start(ctx, "meshloc.recover", trace.SpanKindInternal,
		attribute.Int("meshloc.orphans", orphans))
	return ctx, func() { span.End() }
}

// traceStep starts the span of one step, "meshloc.recover.step", with the
// orphans it judges; the function it returns ends it with the step's
// outcomes (meshloc.outcome.<outcome>: how many) and the dead owners whose
// objects it recovered.
func traceStep(ctx context.Context, objects int) (context.Context, func(outs map[outcome]int, dead map[string]bool)) {
	if !tracing.Recording(ctx) {
		return ctx, func(map[outcome]int, map[string]bool) {}
	}
	ctx, span := tracing.Start(ctx, "meshloc.recover.step", trace.SpanKindInternal,
		attribute.Int("meshloc.objects", objects))
	return ctx, func(outs map[outcome]int, dead map[string]bool) {
		for out, n := range outs {
			span.SetAttributes(attribute.Int("meshloc.outcome."+string(out), n))
		}
		if len(dead) > 0 {
			span.SetAttributes(attribute.StringSlice("meshloc.dead_owners", slices.Sorted(maps.Keys(dead))))
		}
		if outs[OutcomeFailed] > 0 {
			tracing.Fail(span, "some recoveries failed")
		}
		span.End()
	}
}
