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
	ctx, span := tracing.Start(ctx, "meshloc.call", trace.SpanKindClient,
		attribute.String("meshloc.object", object), attribute.String("meshloc.method", method),
		attribute.String("meshloc.operation_id", op.String()))
	defer span.End()
	rep, err := c.callBytes(ctx, op, object, method, args, tracing.Traceparent(ctx))
	if !span.IsRecording() {
		return rep, err
	}
	if err != nil {
		code := "error"
		var werr *wire.Error
		if errors.As(err, &werr) {
			code = wire.CodeName(werr.Code)
		}
		span.SetAttributes(attribute.String("meshloc.code", code))
		tracing.Fail(span, err.Error())
		return rep, err
	}
	span.SetAttributes(attribute.String("meshloc.code", "ok"), attribute.String("meshloc.owner", rep.Node),
		attribute.Int64("meshloc.object_generation", rep.Fence.ObjectGeneration),
		attribute.Int64("meshloc.authority_generation", rep.Fence.AuthorityGeneration),
		attribute.Bool("meshloc.replayed", rep.Replayed))
	return rep, nil
}
