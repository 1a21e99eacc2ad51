package node_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/tracing"
)

// A session's call is one trace, as a call through a gateway is: the
// client's span, the gateway's (its child), the owner's (the gateway's
// child) and the owner's execution; the push that execution makes is
// delivered under a span of the same trace, a child of the execution, and
// reaches the client with that trace's context.
func TestTraceSessionCallAndPush(t *testing.T) {
	exp := traced(t)
	srv := etcdtest.Single(t)
	m := &mesh{etcd: etcdtest.Client(t, srv.Endpoint()), ep: srv.Endpoint()}
	m.add(t, "n1")
	gw := m.add(t, "gw", func(_ int, c *node.Config) { c.Weight = 0 })
	c := newClient(t, client.Config{Nodes: []string{gw.Address()}, Timeout: 20 * time.Second})
	ctx := context.Background()
	s, err := c.OpenSession(ctx, "actor/room/traced")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	say(t, s, "first") // activates the room on n1 and binds the session
	recvN(t, s, 1)
	exp.Reset()
	say(t, s, "traced")
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	p, err := s.Recv(rctx)
	if err != nil {
		t.Fatal(err)
	}
	sc, ok := tracing.ParseTraceparent(p.Traceparent)
	if !ok {
		t.Fatalf("the push carries traceparent %q", p.Traceparent)
	}
	// The push is sent to the client inside its span: wait for it to end.
	var spans []tracetest.SpanStub
	for deadline := time.Now().Add(10 * time.Second); ; {
		spans = inTrace(exp.GetSpans(), sc.TraceID())
		if len(byName(spans, "meshloc.session.push")) == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	one := func(name, node string) tracetest.SpanStub {
		t.Helper()
		for _, sp := range byName(spans, name) {
			if node == "" || attr(sp, "meshloc.node") == node {
				return sp
			}
		}
		t.Fatalf("no span %s on %q in the push's trace: %v", name, node, names(spans))
		return tracetest.SpanStub{}
	}
	call := one("meshloc.session.call", "")
	atGw := one("meshloc.node.call", "gw")
	atOwner := one("meshloc.node.call", "n1")
	exec := one("meshloc.execute", "n1")
	push := one("meshloc.session.push", "gw")
	for _, link := range []struct {
		child, parent tracetest.SpanStub
	}{{atGw, call}, {atOwner, atGw}, {exec, atOwner}, {push, exec}} {
		if link.child.Parent.SpanID() != link.parent.SpanContext.SpanID() {
			t.Errorf("%s (%s) is not a child of %s (%s)", link.child.Name, attr(link.child, "meshloc.node"),
				link.parent.Name, attr(link.parent, "meshloc.node"))
		}
	}
	if got := attr(atOwner, "meshloc.method"); got != "say" {
		t.Errorf("the owner's span has method %q", got)
	}
	if got := attr(call, "meshloc.code"); got != "ok" {
		t.Errorf("the client's span has code %q", got)
	}
}

func byName(spans []tracetest.SpanStub, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}
