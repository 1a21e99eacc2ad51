package client

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshloc/meshloc/pkg/tracing"
	"github.com/meshloc/meshloc/pkg/wire"
)

// tracedCall is a call with tracing on: one client span over all its
// attempts, whose context every attempt carries to the node (the request's
// traceparent), so that the gateway's and the owner's spans join it.
func (c *Client) tracedCall(ctx context.Context, op wire.OperationID, object, method string, args [][]byte) (*Reply, error) {
	ctx, span := startCall(ctx, "meshloc.call", op, object, method)
	rep, err := c.callBytes(ctx, op, object, method, args, tracing.Traceparent(ctx))
	endCall(span, rep, err)
	return rep, err
}

// tracedCall is a session's call with tracing on: the client's span, whose
// context the call carries to the gateway (SessionCall.traceparent).
func (s *Session) tracedCall(ctx context.Context, op wire.OperationID, method string, args [][]byte) (*Reply, error) {
	ctx, span := startCall(ctx, "meshloc.session.call", op, s.object, method)
	rep, err := s.call(ctx, op, method, args, tracing.Traceparent(ctx))
	endCall(span, rep, err)
	return rep, err
}

// startCall starts the client's span of a call; its attributes are made
// only when it is sampled.
func startCall(ctx context.Context, name string, op wire.OperationID, object, method string) (context.Context, trace.Span) {
	ctx, span := tracing.Start(ctx, name, trace.SpanKindClient)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("meshloc.object", object), attribute.String("meshloc.method", method),
			attribute.String("meshloc.operation_id", op.String()))
	}
	return ctx, span
}

// endCall ends a call's span with its outcome: the code, and on success
// the owner and its fence.
func endCall(span trace.Span, rep *Reply, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	if err != nil {
		code := "error"
		var werr *wire.Error
		if errors.As(err, &werr) {
			code = wire.CodeName(werr.Code)
		}
		span.SetAttributes(attribute.String("meshloc.code", code))
		tracing.Fail(span, err.Error())
		return
	}
	span.SetAttributes(attribute.String("meshloc.code", "ok"), attribute.String("meshloc.owner", rep.Node),
		attribute.Int64("meshloc.object_generation", rep.Fence.ObjectGeneration),
		attribute.Int64("meshloc.authority_generation", rep.Fence.AuthorityGeneration),
		attribute.Bool("meshloc.replayed", rep.Replayed))
}
