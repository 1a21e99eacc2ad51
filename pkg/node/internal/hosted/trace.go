package hosted

import (
	"go.opentelemetry.io/otel/attribute"

	"github.com/meshloc/meshloc/pkg/node/calltrace"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// executeTraced is Execute of a traced request: the owner's spans of its
// queue wait and its execution, the durable write a child of the latter
// (persistChange). h.traced, set while it runs, is the execution's span.
func (h *Object) executeTraced(w *Work) *pb.CallReply {
	ctx, span := calltrace.Execute(w.Trace.Span, w.Trace.Queued, h.env.self.ID, h.name)
	defer span.End()
	span.SetAttributes(attribute.String("meshloc.method", w.Req.GetMethod()))
	h.traced = ctx
	defer func() { h.traced = nil }()
	r := h.Execute(w)
	calltrace.Reply(span, r)
	return r
}
