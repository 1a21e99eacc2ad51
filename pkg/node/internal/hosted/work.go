package hosted

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/meshloc/meshloc/pkg/node/calltrace"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Mode is what happens to a request submitted now.
type Mode int

const (
	ModeServing  Mode = iota // queue and run
	ModeBoundary             // source, sealed before CUTOVER: keep in order
	ModeHold                 // source, after CUTOVER: keep until the outcome
	ModeHidden               // target, restored, before its commit: wait
)

// Work is one mailbox item: a request or a timer fire.
type Work struct {
	Req   *pb.CallRequest
	Op    wire.OperationID
	Done  chan *pb.CallReply // buffered 1; nil for a request relayed from a source
	Timer bool
	// relay: where the reply goes when the request was captured elsewhere.
	Relay *RelayRoute
	// Route: the reply route of this node's pending request while it runs
	// elsewhere (0: none); relayer: the owner id it was handed to, the only
	// node that may relay its reply (checked with mutual TLS).
	Route   uint64
	Relayer string
	// fn, when set, is not a request: the drain calls it between two
	// handlers (a pre-copy's snapshot, mailbox.go) and answers nil.
	Fn func()
	// Trace: the call this request is, when it is traced (nil: not).
	Trace *Traced
}

// Traced is a traced request's sampled span (calltrace.Of) and when it was
// queued behind other work (zero: it was not).
type Traced struct {
	Span   trace.SpanContext
	Queued time.Time
}

// TraceOf is what a request keeps of ctx's span: nil unless it is sampled
// (calltrace.Of). It is not inlined on purpose: the span context it copies
// would otherwise sit in the frame of every call's serving, and a call's
// goroutine would grow its stack once more per call (a copy of it).
//
//go:noinline
func TraceOf(ctx context.Context) *Traced {
	sc := calltrace.Of(ctx)
	if !sc.IsSampled() {
		return nil
	}
	return &Traced{Span: sc}
}

// RelayRoute is where the reply of a request captured on a source goes.
type RelayRoute struct {
	Route        uint64
	RelocationID []byte
	Op           []byte
	Requester    *pb.Requester
}

// RelayOf is the relay route of q, a request captured on a source (nil:
// its caller waits nowhere).
func RelayOf(q *pb.CallRequest, relocationID []byte) *RelayRoute {
	rq := q.GetRequester()
	if rq.GetAddress() == "" || rq.GetReplyRoute() == 0 {
		return nil
	}
	return &RelayRoute{Route: rq.GetReplyRoute(), RelocationID: relocationID, Op: q.GetOperationId(), Requester: rq}
}
