package locationd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// waitGoroutines waits (up to 15s) until at most n goroutines run.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after 15s, want at most %d", runtime.NumGoroutine(), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The hostile-process audit: connections that stall in their headers or
// their body are closed by the server after the read timeouts, and the
// goroutines they held end.
func TestStalledRequestsAreClosed(t *testing.T) {
	const (
		readTimeout = time.Second
		conns       = 100 // half stall in the headers, half in the body
	)
	r := start(t, func(c *Config) {
		c.HTTPReadHeaderTimeout = readTimeout / 2
		c.HTTPReadTimeout = readTimeout
	})
	addr := r.srv.HTTPAddr()
	time.Sleep(time.Second) // the server's own start settles
	base := runtime.NumGoroutine()

	type stalled struct {
		c      net.Conn
		sent   time.Time
		header bool
		bound  time.Duration // the server closes it after this long
	}
	var all []stalled
	defer func() {
		for _, s := range all {
			s.c.Close()
		}
	}()
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		s := stalled{c: c, sent: time.Now(), header: i%2 == 0, bound: readTimeout}
		if s.header {
			s.bound = readTimeout / 2
			_, err = io.WriteString(c, "POST /v1/relocations HTTP/1.1\r\nHost: x\r\nContent-Ty")
		} else {
			_, err = io.WriteString(c, "POST /v1/relocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"object\":")
		}
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, s)
	}
	// Each connection holds a goroutine of the server while it stalls.
	for wait := time.Now().Add(readTimeout / 4); runtime.NumGoroutine() < base+conns; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(wait) {
			t.Fatalf("%d goroutines with %d stalled connections (%d before): the test does not stall the server", runtime.NumGoroutine(), conns, base)
		}
	}
	peak := runtime.NumGoroutine()
	for i, s := range all {
		_ = s.c.SetReadDeadline(s.sent.Add(s.bound + 10*time.Second))
		answer, err := io.ReadAll(s.c)
		closed := time.Since(s.sent)
		if err != nil {
			t.Fatalf("connection %d (header %v): not closed by the server: %v", i, s.header, err)
		}
		if closed < s.bound*8/10 {
			t.Errorf("connection %d closed after %s, before its timeout %s", i, closed, s.bound)
		}
		// A stalled body is answered, then closed: a typed 400.
		if !s.header {
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(answer))), nil)
			if err != nil {
				t.Fatalf("connection %d: answer %q: %v", i, answer, err)
			}
			body, _ := io.ReadAll(resp.Body)
			if e := api.DecodeError(resp.StatusCode, body); resp.StatusCode != http.StatusBadRequest || e.Code != api.CodeInvalidArgument || !resp.Close {
				t.Errorf("connection %d: stalled body answered %d %s (close %v)", i, resp.StatusCode, body, resp.Close)
			}
		}
	}
	// Back down: the server's own goroutines (etcd's, the controller's)
	// vary by a few; the stalled connections held conns more.
	waitGoroutines(t, base+conns/5)
	t.Logf("goroutines: %d before, %d with %d stalled connections, %d after", base, peak, conns, runtime.NumGoroutine())
	// The server still serves.
	if status, _, body := rawGet(t, http.MethodGet, r.base+"/healthz"); status != http.StatusOK {
		t.Fatalf("healthz after the stalled connections: %d %s", status, body)
	}
}

// Beyond --http-max-connections, a connection waits unserved until one of
// the open ones closes.
func TestConnectionLimit(t *testing.T) {
	r := start(t, func(c *Config) {
		c.HTTPMaxConnections = 2
		c.HTTPReadHeaderTimeout = 30 * time.Second // the idle connections hold their slots
		c.HTTPReadTimeout = 30 * time.Second
	})
	addr := r.srv.HTTPAddr()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	held := []net.Conn{dial(), dial()}
	third := dial()
	if _, err := io.WriteString(third, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = third.SetReadDeadline(time.Now().Add(time.Second))
	var b [1]byte
	if n, err := third.Read(b[:]); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a third connection was served while 2 (the limit) were open: %d bytes, %v", n, err)
	}
	held[0].Close()
	_ = third.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(third), nil)
	if err != nil {
		t.Fatalf("the third connection, once one closed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz on the third connection: %d", resp.StatusCode)
	}
}

// A POST body that is not JSON is refused with 415, before anything is read
// from etcd or asked of a node; an empty body needs no Content-Type.
func TestUnsupportedMediaType(t *testing.T) {
	r := start(t, nil)
	c := r.etcd(t)
	before := storeState(t, c)
	const obj = `{"object":"actor/counter/c1"}`
	for _, tc := range []struct {
		path, ctype, body string
		chunked           bool
		status            int
		code              string
	}{
		{"/v1/relocations", "text/plain", obj, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/relocations", "", obj, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/relocations", "", obj, true, 415, api.CodeUnsupportedMediaType},
		{"/v1/relocations", "application/json; charset=latin1", obj, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/relocations", "application/json; foo=bar", obj, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/relocations", "application/json; =", obj, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/relocations", "application/json-seq", obj, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/relocations", "application/x-www-form-urlencoded", "object=actor/counter/c1", false, 415, api.CodeUnsupportedMediaType},
		// JSON, parameters allowed: the request goes on (no such object).
		{"/v1/relocations", "application/json", obj, false, 404, api.CodeNotFound},
		{"/v1/relocations", "application/json;charset=UTF-8", obj, true, 404, api.CodeNotFound},
		{"/v1/relocations", "Application/JSON", obj, false, 404, api.CodeNotFound},
		// An empty body: the media type is not judged.
		{"/v1/relocations", "", "", false, 400, api.CodeInvalidArgument},
		{"/v1/owners/n9/drain", "", "", false, 404, api.CodeNotFound},
		{"/v1/owners/n9/drain", "", "", true, 404, api.CodeNotFound},
		{"/v1/owners/n9/drain", "application/x-www-form-urlencoded", "", false, 404, api.CodeNotFound},
		{"/v1/owners/n9/drain", "", "{}", false, 415, api.CodeUnsupportedMediaType},
		{"/v1/owners/n9/drain", "text/plain", "{}", true, 415, api.CodeUnsupportedMediaType},
		{"/v1/owners/n9/drain", "application/json", "{}", false, 404, api.CodeNotFound},
		{"/v1/groups", "text/plain", `{"group":"group/g1"}`, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/groups/join", "", `{"group":"group/g1","actor":"actor/counter/c1"}`, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/groups/leave", "text/json", `{"group":"group/g1","actor":"actor/counter/c1"}`, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/rebalance", "text/plain", `{"budget":1}`, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/rebalance", "application/json", `{"budget":-1}`, false, 400, api.CodeInvalidArgument},
	} {
		var body io.Reader = strings.NewReader(tc.body)
		if tc.chunked {
			body = io.MultiReader(body) // no known length: sent chunked
		}
		req, err := http.NewRequest(http.MethodPost, r.base+tc.path, body)
		if err != nil {
			t.Fatal(err)
		}
		if tc.ctype != "" {
			req.Header.Set("Content-Type", tc.ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var eb api.ErrorBody
		if err := json.Unmarshal(b, &eb); err != nil || eb.Error == nil {
			t.Errorf("POST %s %q %q: body %q is not an error body", tc.path, tc.ctype, tc.body, b)
			continue
		}
		if resp.StatusCode != tc.status || eb.Error.Code != tc.code || eb.Error.Message == "" {
			t.Errorf("POST %s %q %q (chunked %v): %d %s, want %d %s", tc.path, tc.ctype, tc.body, tc.chunked, resp.StatusCode, b, tc.status, tc.code)
		}
	}
	if after := storeState(t, c); after != before {
		t.Errorf("refused requests changed the store: %s → %s", before, after)
	}
}

// slowAdmin is a node's AdminService whose relocation and drain take longer
// than locationd's --http-write-timeout.
type slowAdmin struct {
	rpcpb.UnimplementedAdminServiceServer
	pause time.Duration
}

func (a slowAdmin) Relocate(ctx context.Context, c *pb.RelocateCommand) (*pb.RelocationStatus, error) {
	select {
	case <-time.After(a.pause):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &pb.RelocationStatus{RelocationId: make([]byte, 16), Object: c.GetObject(), Source: "slow@1", Target: "n2@2",
		Role: "source", Phase: "COMMITTED", Outcome: api.OutcomeCompleted, Code: pb.Code_CODE_OK}, nil
}

func (a slowAdmin) Drain(_ *pb.DrainRequest, stream grpc.ServerStreamingServer[pb.DrainEvent]) error {
	steps := []*pb.DrainEvent{
		{Event: &pb.DrainEvent_Progress{Progress: &pb.DrainProgress{Kind: api.DrainKindStarted, Remaining: 1}}},
		{Event: &pb.DrainEvent_Progress{Progress: &pb.DrainProgress{Kind: api.DrainKindProgress, Moved: 1}}},
		{Event: &pb.DrainEvent_Report{Report: &pb.DrainReport{Owner: "slow@1", Stopping: false}}},
	}
	for i, ev := range steps {
		if i > 0 {
			select {
			case <-time.After(a.pause):
			case <-stream.Context().Done():
				return stream.Context().Err()
			}
		}
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	return nil
}

// The routes that answer when a long operation ended (a relocation, a
// drain's stream) lift the write timeout for their request.
func TestLongAnswersOutliveWriteTimeout(t *testing.T) {
	const writeTimeout = 1200 * time.Millisecond
	r := start(t, func(c *Config) {
		c.RequestTimeout = time.Second
		c.HTTPWriteTimeout = writeTimeout
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rpcpb.RegisterAdminServiceServer(gs, slowAdmin{pause: writeTimeout + 800*time.Millisecond})
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })

	c := r.etcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := lease.Start(ctx, c, keyspace.Default(), lease.Config{
		OwnerID: "slow", TTL: 5 * time.Second,
		Descriptor: lease.Descriptor{RoutingID: strings.Repeat("ab", 16), Address: lis.Addr().String(), State: lease.StateServing,
			Weight: 1, ApplicationVersion: "v1", StartedUnixMs: 1_700_000_000_000},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close(context.Background()) })
	activate(t, authority.New(c, keyspace.Default()), "actor/counter/slow", k)

	start := time.Now()
	rel, _, err := r.api.Relocate(ctx, api.RelocateRequest{Object: "actor/counter/slow", TimeoutMs: 5000})
	if err != nil || rel.Outcome != api.OutcomeCompleted {
		t.Fatalf("relocation answered after %s: %v %+v", time.Since(start), err, rel)
	}
	if d := time.Since(start); d < writeTimeout {
		t.Fatalf("the relocation answered in %s: the test does not outlast the write timeout", d)
	}

	start = time.Now()
	var kinds []string
	rep, err := r.api.Drain(ctx, "slow", api.DrainRequest{}, func(ev api.DrainEvent, _ []byte) { kinds = append(kinds, ev.Kind) })
	if err != nil || rep.Owner != "slow@1" {
		t.Fatalf("drain after %s: %v %+v (events %v)", time.Since(start), err, rep, kinds)
	}
	if want := fmt.Sprint([]string{"started", "progress", "report"}); fmt.Sprint(kinds) != want {
		t.Fatalf("drain events %v, want %s", kinds, want)
	}
}
