package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// With an OTLP endpoint in the environment, a command is one trace: its
// requests to locationd carry the trace's context, and -v prints its id
// on stderr. Without one, -v says tracing is off and nothing is sent.
func TestVerbosePrintsTraceID(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("traceparent"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"owners":[]}`))
	}))
	defer srv.Close()
	noEnv := func(string) (string, bool) { return "", false }

	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"-v", "--locationd", srv.URL, "owners"}, &stdout, &stderr, noEnv); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "trace: none (tracing is off") || got[0] != "" {
		t.Fatalf("tracing off: stderr %q, traceparent %q", stderr.String(), got[0])
	}

	col := collector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+col.addr)
	stdout.Reset()
	stderr.Reset()
	if code := run(context.Background(), []string{"-v", "--locationd", srv.URL, "owners"}, &stdout, &stderr, noEnv); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	m := regexp.MustCompile(`(?m)^trace ([0-9a-f]{32})$`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("stderr %q: no trace id", stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if tp := got[len(got)-1]; !strings.HasPrefix(tp, "00-"+m[1]+"-") {
		t.Fatalf("the request's traceparent %q is not in trace %s", tp, m[1])
	}
	if n := col.spans.Load(); n != 1 {
		t.Fatalf("the collector got %d spans, want the command's", n)
	}
}

// otlpSink is an OTLP/gRPC trace collector that counts spans.
type otlpSink struct {
	coltracepb.UnimplementedTraceServiceServer
	addr  string
	spans atomic.Int64
}

func (s *otlpSink) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			s.spans.Add(int64(len(ss.GetSpans())))
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func collector(t *testing.T) *otlpSink {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &otlpSink{addr: lis.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, s)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return s
}
