package calltrace_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshloc/meshloc/pkg/node/calltrace"
	"github.com/meshloc/meshloc/pkg/tracing"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// What tracing off adds to a gateway's and an owner's handling of one call
// (Node.Call's span, the forward's traceparent, the request's trace, the
// histogram's exemplar): nothing allocated, a few nanoseconds.
func BenchmarkOff(b *testing.B) {
	if tracing.On() {
		b.Skip("tracing is on in this process")
	}
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x_seconds"})
	req := &pb.CallRequest{Object: "actor/counter/c", Method: "add"}
	rep := &pb.CallReply{}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c := calltrace.Serve(ctx, "n1", req)
		calltrace.Forward(c, req)
		_ = calltrace.Of(c)
		calltrace.End(c, rep)
		tracing.Observe(c, h, 0.001)
	}
}

func TestOffAllocatesNothing(t *testing.T) {
	req := &pb.CallRequest{Object: "actor/counter/c", Method: "add"}
	rep := &pb.CallReply{}
	if n := testing.AllocsPerRun(100, func() {
		c := calltrace.Serve(context.Background(), "n1", req)
		calltrace.Forward(c, req)
		_ = calltrace.Of(c)
		calltrace.End(c, rep)
	}); n != 0 {
		t.Fatalf("tracing off allocates %v times a call", n)
	}
}
