package gateway

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshloc/meshloc/pkg/node/calltrace"
	"github.com/meshloc/meshloc/pkg/tracing"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// forward sends a session's call to the object's owner under the
// gateway's span of it, a child of the client's (the call's traceparent):
// the owner's spans then join the gateway's, as for a call through a
// gateway. Off, it is the bare call, the client's traceparent carried on.
func (g *gwSession) forward(ctx context.Context, addr string, req *pb.CallRequest) (*pb.CallReply, error) {
	if !tracing.On() {
		return g.gw.cfg.Peers.Call(ctx, addr, req)
	}
	ctx, started := calltrace.Serve(ctx, g.gw.cfg.Self.Gateway, req)
	calltrace.Forward(ctx, req)
	if !started {
		return g.gw.cfg.Peers.Call(ctx, addr, req)
	}
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(attribute.Int64("meshloc.session_seq", int64(req.GetSessionSeq())))
	rep, err := g.gw.cfg.Peers.Call(ctx, addr, req)
	if err != nil {
		tracing.Fail(span, err.Error())
		span.End()
		return rep, err
	}
	calltrace.End(ctx, true, rep)
	return rep, nil
}

// send sends a frame to the client; a push that carries the trace of the
// turn that made it is sent under a span of that trace,
// "meshloc.session.push".
func (g *gwSession) send(stream rpcpb.SessionService_OpenServer, f *pb.SessionServerFrame) error {
	p := f.GetPush()
	if p.GetTraceparent() == "" || !tracing.On() {
		return stream.Send(f)
	}
	ctx := tracing.WithTraceparent(g.ctx, p.GetTraceparent())
	_, span := tracing.Start(ctx, "meshloc.session.push", trace.SpanKindProducer,
		attribute.String("meshloc.node", g.gw.cfg.Self.Gateway), attribute.String("meshloc.object", g.obj.String()),
		attribute.Int64("meshloc.push_seq", int64(p.GetSeq())))
	err := stream.Send(f)
	if err != nil {
		tracing.Fail(span, err.Error())
	}
	span.End()
	return err
}
