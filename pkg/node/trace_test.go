package node_test

import (
	"context"
	"fmt"
	"html"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/tracing"
)

// traced turns tracing on for the test, every trace sampled, into the
// SDK's in-memory exporter (before the nodes start: their gRPC options
// are fixed then).
func traced(t *testing.T) *tracetest.InMemoryExporter {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	restore := tracing.Use(tp)
	t.Cleanup(func() { restore(); _ = tp.Shutdown(context.Background()) })
	return exp
}

func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// inTrace is the spans of trace id, by start time.
func inTrace(spans tracetest.SpanStubs, id trace.TraceID) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.SpanContext.TraceID() == id {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].StartTime.Before(out[j].StartTime) })
	return out
}

// One call through a gateway is one trace: the client's span, the
// gateway's (its child), the owner's (the gateway's child) and the
// owner's execution (the owner's child); a message it sends is in it too.
// One relocation is one trace with both nodes' spans: each node's
// timeline steps, in the timeline's order, and its etcd transactions. A
// drain is one trace with its bulk moves on both nodes.
func TestTraceCallAndRelocation(t *testing.T) {
	exp := traced(t)
	srv := etcdtest.Single(t)
	m := &mesh{etcd: etcdtest.Client(t, srv.Endpoint()), ep: srv.Endpoint()}
	n1 := m.add(t, "n1")
	gw := m.add(t, "gw", func(_ int, c *node.Config) { c.Weight = 0 })
	c := newClient(t, client.Config{Nodes: []string{gw.Address()}, Timeout: 20 * time.Second})
	ctx := context.Background()
	const obj = "actor/counter/traced"
	if _, err := c.Call(ctx, obj, "add", "1"); err != nil { // activates it on n1
		t.Fatal(err)
	}
	exp.Reset()
	if _, err := c.Call(ctx, obj, "add", "2"); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	var callSpan *tracetest.SpanStub
	for i := range spans {
		if spans[i].Name == "meshloc.call" {
			callSpan = &spans[i]
		}
	}
	if callSpan == nil {
		t.Fatalf("no client span among %d", len(spans))
	}
	got := inTrace(spans, callSpan.SpanContext.TraceID())
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range got {
		byID[s.SpanContext.SpanID()] = s
	}
	parentOf := func(s tracetest.SpanStub) (tracetest.SpanStub, bool) {
		p, ok := byID[s.Parent.SpanID()]
		return p, ok
	}
	var gwSpan, ownerSpan, execSpan *tracetest.SpanStub
	for i := range got {
		s := got[i]
		switch {
		case s.Name == "meshloc.node.call" && attr(s, "meshloc.node") == "gw":
			gwSpan = &got[i]
		case s.Name == "meshloc.node.call" && attr(s, "meshloc.node") == "n1":
			ownerSpan = &got[i]
		case s.Name == "meshloc.execute":
			execSpan = &got[i]
		}
	}
	if gwSpan == nil || ownerSpan == nil || execSpan == nil {
		t.Fatalf("trace of the call: %v; want the gateway's, the owner's and the execution's spans", names(got))
	}
	for _, link := range []struct{ child, parent *tracetest.SpanStub }{{gwSpan, callSpan}, {ownerSpan, gwSpan}, {execSpan, ownerSpan}} {
		if p, ok := parentOf(*link.child); !ok || p.SpanContext.SpanID() != link.parent.SpanContext.SpanID() {
			t.Fatalf("%s (%s) has parent %v, want %s (%s)", link.child.Name, attr(*link.child, "meshloc.node"), p.Name, link.parent.Name, attr(*link.parent, "meshloc.node"))
		}
	}
	if callSpan.SpanKind != trace.SpanKindClient || attr(*callSpan, "meshloc.object") != obj || attr(*ownerSpan, "meshloc.code") != "ok" ||
		attr(*execSpan, "meshloc.method") != "add" || attr(*callSpan, "meshloc.operation_id") == "" ||
		attr(*callSpan, "meshloc.operation_id") != attr(*ownerSpan, "meshloc.operation_id") || attr(*ownerSpan, "meshloc.object_generation") == "" {
		t.Fatalf("attributes: client %v, owner %v, execute %v", callSpan.Attributes, ownerSpan.Attributes, execSpan.Attributes)
	}

	// A message continues the trace of the turn that sent it: the
	// destination's execution is in the caller's trace.
	const from, to = "actor/bank/trace-a", "actor/bank/trace-b"
	readBankOf(t, c, from)
	readBankOf(t, c, to)
	exp.Reset()
	if _, err := c.Call(ctx, from, "chain", "t1", "3", to); err != nil {
		t.Fatal(err)
	}
	var sent []tracetest.SpanStub
	for deadline := time.Now().Add(10 * time.Second); ; { // the message goes after the reply
		spans := exp.GetSpans()
		for _, s := range spans {
			if s.Name == "meshloc.call" {
				sent = inTrace(spans, s.SpanContext.TraceID())
			}
		}
		if slices.ContainsFunc(sent, func(s tracetest.SpanStub) bool { return s.Name == "meshloc.execute" && attr(s, "meshloc.object") == to }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the message's execution is not in its sender's trace: %v", names(sent))
		}
		time.Sleep(20 * time.Millisecond)
	}

	n2 := m.add(t, "n2")
	exp.Reset()
	st, err := n1.Relocate(ctx, obj, node.RelocateOptions{Target: n2.Self().ID})
	if err != nil || st.GetOutcome() != "completed" {
		t.Fatalf("relocate: %+v %v", st, err)
	}
	if st.GetTraceId() == "" {
		t.Fatal("the relocation's status names no trace")
	}
	id, err := trace.TraceIDFromHex(st.GetTraceId())
	if err != nil {
		t.Fatal(err)
	}
	// The target's spans end as its run does, after the source's status
	// returned: wait for its root.
	var rel []tracetest.SpanStub
	for deadline := time.Now().Add(10 * time.Second); ; {
		rel = inTrace(exp.GetSpans(), id)
		if roles(rel)["target"] || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := roles(rel); !r["source"] || !r["target"] {
		t.Fatalf("relocation trace roles %v: %v", r, names(rel))
	}
	var steps []string
	txns := map[string]bool{}
	for _, s := range rel {
		if step, ok := strings.CutPrefix(s.Name, "meshloc.relocation."); ok && attr(s, "meshloc.role") == "source" {
			steps = append(steps, step)
		}
		if strings.HasPrefix(s.Name, "etcd.txn ") {
			txns[attr(s, "meshloc.txn")] = true
		}
	}
	var timeline []string
	for _, mk := range st.GetTimeline() {
		if mk.GetStep() != "done" {
			timeline = append(timeline, mk.GetStep())
		}
	}
	if !slices.Equal(steps, timeline) {
		t.Fatalf("source step spans %v, timeline %v", steps, timeline)
	}
	if !txns["intent"] || !txns["commit"] {
		t.Fatalf("etcd transactions in the relocation's trace: %v; want its intent and its commit", txns)
	}
	if path := os.Getenv("MESHLOC_TRACE_SVG"); path != "" {
		writeTraceSVG(t, path, rel)
	}

	// A drain is one trace: its bulk moves on both nodes, with their etcd
	// transactions, are its spans.
	exp.Reset()
	dctx, dspan := tracing.Start(ctx, "test.drain", trace.SpanKindClient)
	if rep, err := n2.Drain(dctx, node.DrainOptions{}); err != nil || len(rep.Moved) == 0 {
		t.Fatalf("drain: %+v %v", rep, err)
	}
	dspan.End()
	var dr []tracetest.SpanStub
	for deadline := time.Now().Add(10 * time.Second); ; {
		dr = inTrace(exp.GetSpans(), dspan.SpanContext().TraceID())
		bulks := map[string]bool{}
		for _, s := range dr {
			if s.Name == "meshloc.relocate.bulk" {
				bulks[attr(s, "meshloc.role")] = true
			}
		}
		if bulks["source"] && bulks["target"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the drain's trace: %v", names(dr))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !slices.ContainsFunc(dr, func(s tracetest.SpanStub) bool { return s.Name == "meshloc.drain" }) ||
		!slices.ContainsFunc(dr, func(s tracetest.SpanStub) bool { return s.Name == "etcd.txn commit" }) {
		t.Fatalf("the drain's trace: %v; want its span and its commits", names(dr))
	}
}

func roles(spans []tracetest.SpanStub) map[string]bool {
	r := map[string]bool{}
	for _, s := range spans {
		if s.Name == "meshloc.relocate" {
			r[attr(s, "meshloc.role")] = true
		}
	}
	return r
}

func names(spans []tracetest.SpanStub) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name+"@"+attr(s, "meshloc.node")+attr(s, "meshloc.role"))
	}
	return out
}

// writeTraceSVG draws spans (one trace) as a waterfall: a row per span by
// start time, indented by depth, its bar on a common time axis. Set
// MESHLOC_TRACE_SVG to a path and the test writes the relocation's trace
// there (docs/relocation-trace.svg is made so).
func writeTraceSVG(t *testing.T, path string, spans []tracetest.SpanStub) {
	t.Helper()
	depth := map[trace.SpanID]int{}
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
	}
	var depthOf func(s tracetest.SpanStub) int
	depthOf = func(s tracetest.SpanStub) int {
		if d, ok := depth[s.SpanContext.SpanID()]; ok {
			return d
		}
		d := 0
		if p, ok := byID[s.Parent.SpanID()]; ok {
			d = depthOf(p) + 1
		}
		depth[s.SpanContext.SpanID()] = d
		return d
	}
	t0, t1 := spans[0].StartTime, spans[0].EndTime
	for _, s := range spans {
		if s.StartTime.Before(t0) {
			t0 = s.StartTime
		}
		if s.EndTime.After(t1) {
			t1 = s.EndTime
		}
	}
	const labelW, barW, rowH = 430, 520, 18
	total := float64(t1.Sub(t0))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="monospace" font-size="11">`+"\n", labelW+barW+90, rowH*(len(spans)+2))
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="4" y="13" font-weight="bold">one relocation, one trace: %s (%.2f ms)</text>`+"\n", spans[0].SpanContext.TraceID(), total/1e6)
	for i, s := range spans {
		y := rowH * (i + 1)
		who := attr(s, "meshloc.role")
		if n := attr(s, "meshloc.node"); n != "" {
			who = n
		}
		label := s.Name
		if who != "" {
			label += " [" + who + "]"
		}
		color := "#4e79a7" // source
		switch {
		case strings.HasPrefix(s.Name, "etcd.txn"):
			color = "#f28e2b"
		case who == "target":
			color = "#59a14f"
		case strings.Contains(s.Name, "/"):
			color = "#9c9c9c" // the gRPC stream's spans
		}
		x := labelW + int(float64(s.StartTime.Sub(t0))/total*barW)
		w := max(1, int(float64(s.EndTime.Sub(s.StartTime))/total*barW))
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text><rect x="%d" y="%d" width="%d" height="12" fill="%s"/><text x="%d" y="%d">%.2f ms</text>`+"\n",
			4+14*depthOf(s), y+12, html.EscapeString(label), x, y+2, w, color, x+w+4, y+12, float64(s.EndTime.Sub(s.StartTime))/1e6)
	}
	b.WriteString("</svg>\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
