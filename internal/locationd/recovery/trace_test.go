package recovery_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/locationd/recovery"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/tracing"
)

// A pass of the controller that recovers orphans is one trace: its root
// "meshloc.recover", a step under it with the step's outcomes and the dead
// owner, and under the step the span of its etcd writes.
func TestTraceRecovery(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	restore := tracing.Use(tp)
	t.Cleanup(func() { restore(); _ = tp.Shutdown(context.Background()) })

	srv := etcdtest.Single(t)
	cli := etcdtest.Client(t, srv.Endpoint())
	ctx := context.Background()
	st := authority.New(cli, keys)
	ghost := startOwner(t, cli, "ghost")
	startOwner(t, cli, "live", "counter")
	for i := range 3 {
		res, err := st.Activate(ctx, authority.ActivateRequest{Object: keyspace.Actor("counter", fmt.Sprint("c", i)), Owner: ref(ghost),
			Node: authority.NodeRef{RoutingID: strings.Repeat("ab", 16), Address: "127.0.0.1:1"}})
		if err != nil || !res.Won {
			t.Fatal(res, err)
		}
	}
	if err := ghost.Close(ctx); err != nil { // its objects are orphans
		t.Fatal(err)
	}
	rec := start(t, cli, "r", func(c *recovery.Config) { c.Recover, c.Grace, c.Retry = true, 0, 200*time.Millisecond })
	leads(t, cli, rec, 30*time.Second)
	waitFor(t, "recovered", 30*time.Second, func() error {
		if s := rec.c.Status(); s.Recovered != 3 {
			return fmt.Errorf("status %+v", s)
		}
		return nil
	})
	rec.stop() // every span of the passes has ended
	spans := exp.GetSpans()
	find := func(name string, ok func(tracetest.SpanStub) bool) *tracetest.SpanStub {
		for i := range spans {
			if spans[i].Name == name && ok(spans[i]) {
				return &spans[i]
			}
		}
		return nil
	}
	step := find("meshloc.recover.step", func(s tracetest.SpanStub) bool { return intAttr(s, "meshloc.outcome.recovered") > 0 })
	if step == nil {
		t.Fatalf("no step span recovered anything: %d spans", len(spans))
	}
	if n := intAttr(*step, "meshloc.outcome.recovered"); n != 3 {
		t.Errorf("the step recovered %d, want 3", n)
	}
	if got := attrOf(*step, "meshloc.dead_owners"); !strings.Contains(got, "ghost") {
		t.Errorf("the step's dead owners: %q", got)
	}
	pass := find("meshloc.recover", func(s tracetest.SpanStub) bool { return s.SpanContext.SpanID() == step.Parent.SpanID() })
	if pass == nil || pass.Parent.IsValid() || pass.SpanContext.TraceID() != step.SpanContext.TraceID() {
		t.Fatalf("the step's parent is not a pass that roots its trace: %+v", pass)
	}
	writes := find("etcd.txns recover", func(s tracetest.SpanStub) bool { return s.Parent.SpanID() == step.SpanContext.SpanID() })
	if writes == nil {
		t.Fatal("no span of the step's etcd writes")
	}
	if intAttr(*writes, "meshloc.txns") != 3 || intAttr(*writes, "meshloc.succeeded") != 3 {
		t.Errorf("the writes' span: txns %d succeeded %d, want 3 and 3", intAttr(*writes, "meshloc.txns"), intAttr(*writes, "meshloc.succeeded"))
	}
}

func attrOf(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

func intAttr(s tracetest.SpanStub, key string) int64 {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.AsInt64()
		}
	}
	return 0
}
