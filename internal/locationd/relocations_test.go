package locationd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// mesh is an embedded etcd, in-process nodes and a locationd against them.
type mesh struct {
	etcd  *clientv3.Client
	ep    string
	nodes []*node.Node
	ld    *running
}

func startNode(t *testing.T, ep, name string) *node.Node {
	t.Helper()
	reg := actor.NewRegistry()
	if err := builtin.Register(reg); err != nil {
		t.Fatal(err)
	}
	cfg := node.DefaultConfig()
	cfg.Name = name
	cfg.EtcdEndpoints = []string{ep}
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTP = ""
	cfg.LeaseTTL = 2 * time.Second
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(cfg, node.WithRegistry(reg), node.WithListener(lis), node.WithMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Stop(sctx)
	})
	return n
}

func startMesh(t *testing.T, nodes int) *mesh {
	t.Helper()
	srv := etcdtest.Single(t)
	m := &mesh{ep: srv.Endpoint(), etcd: etcdtest.Client(t, srv.Endpoint())}
	for i := range nodes {
		m.nodes = append(m.nodes, startNode(t, m.ep, fmt.Sprintf("n%d", i+1)))
	}
	m.ld = start(t, func(c *Config) { c.EtcdEndpoints = []string{m.ep} })
	return m
}

func (m *mesh) owner(t *testing.T, name string) authority.OwnerRef {
	t.Helper()
	obj, err := keyspace.ParseObject(name)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := authority.New(m.etcd, keyspace.Default()).Read(context.Background(), obj)
	if err != nil {
		t.Fatal(err)
	}
	return snap.Record.Owner
}

func (m *mesh) nodeOf(t *testing.T, o authority.OwnerRef) *node.Node {
	t.Helper()
	for _, n := range m.nodes {
		if n.Self() == o {
			return n
		}
	}
	t.Fatalf("owner %s is not a node of the mesh", o)
	return nil
}

func (m *mesh) other(t *testing.T, o authority.OwnerRef) *node.Node {
	t.Helper()
	for _, n := range m.nodes {
		if n.Self() != o {
			return n
		}
	}
	t.Fatal("no other node")
	return nil
}

func counterValue(t *testing.T, c *client.Client, name, method string, args ...string) int64 {
	t.Helper()
	r, err := c.Call(context.Background(), name, method, args...)
	if err != nil {
		t.Fatalf("%s %s: %v", name, method, err)
	}
	var v struct{ Value int64 }
	if err := json.Unmarshal(r.Payload, &v); err != nil {
		t.Fatalf("%s %s: %s: %v", name, method, r.Payload, err)
	}
	return v.Value
}

// post sends a raw POST /v1/relocations and returns status and body.
func post(t *testing.T, base, query, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(base+"/v1/relocations"+query, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.Bytes()
}

func TestRelocateThroughAPI(t *testing.T) {
	m := startMesh(t, 2)
	ctx := context.Background()
	cl, err := client.New(ctx, client.Config{Etcd: m.etcd})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const obj = "actor/counter/c1"
	for i := int64(1); i <= 3; i++ {
		if v := counterValue(t, cl, obj, "add", "1"); v != i {
			t.Fatalf("add: %d, want %d", v, i)
		}
	}
	src := m.owner(t, obj)
	lc := m.ld.api

	// 1. Placement chooses the target: the only other node.
	rel, raw, err := lc.Relocate(ctx, apiRelocate(obj, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	dst := m.owner(t, obj)
	if rel.Outcome != "completed" || rel.Code != "ok" || rel.Object != obj || rel.Role != "source" || rel.Node != src.ID ||
		rel.Source != src.String() || rel.Target != dst.String() || dst == src || dst != m.other(t, src).Self() ||
		rel.Ended == "" || rel.Started == "" || rel.EndedUnixMs < rel.StartedUnixMs || rel.PayloadBytes == 0 {
		t.Fatalf("relocation %s (owner before %s, after %s)", raw, src, dst)
	}
	if _, err := wire.ParseOperationID(rel.RelocationID); err != nil { // a UUIDv7 in text form
		t.Fatalf("relocationId %q: %v", rel.RelocationID, err)
	}
	for _, field := range []string{`"relocationId"`, `"object"`, `"source"`, `"target"`, `"role"`, `"phase"`, `"outcome"`, `"code"`,
		`"message"`, `"started"`, `"ended"`, `"interruptionMicros"`, `"payloadBytes"`} {
		if !strings.Contains(string(raw), field) {
			t.Errorf("relocation JSON lacks %s: %s", field, raw)
		}
	}
	if v := counterValue(t, cl, obj, "add", "1"); v != 4 {
		t.Fatalf("after the move: %d, want 4", v)
	}
	t.Logf("relocated %s → %s, interruption %dµs", rel.Source, rel.Target, rel.InterruptionMicros)

	// 2. GET lists both sides of it. The POST returns when the source saw
	// the commit in etcd; the target records its end moments later.
	var list api.RelocationsResponse

	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		list, raw, err = lc.Relocations(ctx, api.RelocationsQuery{})
		if err != nil {
			t.Fatal(err)
		}
		ended := 0
		for _, r := range list.Relocations {
			if !r.InFlight() && r.Outcome != "" {
				ended++
			}
		}
		if ended == len(list.Relocations) || time.Now().After(deadline) {
			break
		}
	}
	if len(list.Relocations) != 2 || len(list.Unreachable) != 0 {
		t.Fatalf("list: %s", raw)
	}
	roles := map[string]string{}
	for _, r := range list.Relocations {
		if r.RelocationID != rel.RelocationID || r.Outcome != "completed" || r.InFlight() {
			t.Fatalf("listed %+v, want relocation %s completed", r, rel.RelocationID)
		}
		roles[r.Role] = r.Node
	}
	if roles["source"] != src.ID || roles["target"] != dst.ID {
		t.Fatalf("roles %v", roles)
	}

	// 3. A named target: back to the first node.
	rel2, raw, err := lc.Relocate(ctx, apiRelocate(obj, src.ID, 5000))
	if err != nil {
		t.Fatal(err)
	}
	back := m.owner(t, obj)
	if rel2.Outcome != "completed" || back.ID != src.ID || rel2.Source != dst.String() || rel2.Target != back.String() {
		t.Fatalf("relocation to %s: %s; owner now %s", src.ID, raw, back)
	}
	if v := counterValue(t, cl, obj, "get"); v != 4 {
		t.Fatalf("after the move back: %d, want 4", v)
	}

	// 4. Filters and order: the most recently ended first.
	for _, tc := range []struct {
		q    api.RelocationsQuery
		want int
	}{
		{api.RelocationsQuery{}, 4},
		{api.RelocationsQuery{Object: obj}, 4},
		{api.RelocationsQuery{Object: "actor/counter/other"}, 0},
		{api.RelocationsQuery{InFlight: new(true)}, 0},
		{api.RelocationsQuery{InFlight: new(false)}, 4},
		{api.RelocationsQuery{Object: obj, InFlight: new(false)}, 4},
	} {
		got, raw, err := lc.Relocations(ctx, tc.q)
		if err != nil {
			t.Fatalf("%v: %v", tc.q.Values(), err)
		}
		if len(got.Relocations) != tc.want {
			t.Errorf("%v: %d relocations, want %d: %s", tc.q.Values(), len(got.Relocations), tc.want, raw)
		}
	}
	got, _, _ := lc.Relocations(ctx, api.RelocationsQuery{})
	if got.Relocations[0].RelocationID != rel2.RelocationID || got.Relocations[3].RelocationID != rel.RelocationID {
		t.Errorf("order: %+v", got.Relocations)
	}

	// 5. Typed refusals, and nothing moved.
	for _, tc := range []struct {
		req  api.RelocateRequest
		code string
		msg  string
	}{
		{apiRelocate(obj, src.ID, 0), "conflict", "already owned by"},
		{apiRelocate(obj, "n9", 0), "conflict", "target n9 is not a live owner"},
		{apiRelocate("actor/counter/missing", "", 0), "not_found", "object not found"},
		{apiRelocate("actor/counter/c1/x", "", 0), "invalid_argument", ""},
	} {
		_, raw, err := lc.Relocate(ctx, tc.req)
		e, ok := api.AsError(err)
		if !ok || e.Code != tc.code || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("relocate %+v: %v %s, want %s …%s…", tc.req, err, raw, tc.code, tc.msg)
		}
	}
	if o := m.owner(t, obj); o != back {
		t.Errorf("a refused relocation moved the object: %s → %s", back, o)
	}
}

func apiRelocate(obj, target string, timeoutMs int64) api.RelocateRequest {
	return api.RelocateRequest{Object: obj, Target: target, TimeoutMs: timeoutMs}
}

// The owner of the object is gone: 503 unavailable, "owner not alive". A live
// owner that does not answer is listed as unreachable by GET.
func TestRelocateOwnerGone(t *testing.T) {
	m := startMesh(t, 1)
	ctx := context.Background()
	ghost := startOwner(t, m.etcd, "ghost")
	activate(t, authority.New(m.etcd, keyspace.Default()), "actor/counter/g1", ghost)
	if err := ghost.Close(ctx); err != nil {
		t.Fatal(err)
	}
	status, body := post(t, m.ld.base, "", `{"object":"actor/counter/g1"}`)
	if status != 503 || !strings.Contains(string(body), `"code":"unavailable"`) || !strings.Contains(string(body), "owner not alive") {
		t.Fatalf("owner gone: %d %s", status, body)
	}

	// A live owner whose address nobody serves.
	k, err := lease.Start(ctx, m.etcd, keyspace.Default(), lease.Config{
		OwnerID: "mute", TTL: 5 * time.Second,
		Descriptor: lease.Descriptor{RoutingID: strings.Repeat("cd", 16), Address: fmt.Sprintf("127.0.0.1:%d", etcdtest.FreePort(t)),
			State: lease.StateServing, Weight: 1, ApplicationVersion: "v1", StartedUnixMs: time.Now().UnixMilli()},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close(ctx)
	began := time.Now()
	got, raw, err := m.ld.api.Relocations(ctx, api.RelocationsQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Unreachable) != 1 || got.Unreachable[0].ID != "mute" || got.Unreachable[0].Error == "" || got.Relocations == nil {
		t.Fatalf("list with a mute owner: %s", raw)
	}
	if d := time.Since(began); d > NodeListTimeout+3*time.Second {
		t.Errorf("list took %s with a mute owner", d)
	}
	// Relocating an object of the mute owner: the node does not answer.
	activate(t, authority.New(m.etcd, keyspace.Default()), "actor/counter/m1", k)
	status, body = post(t, m.ld.base, "", `{"object":"actor/counter/m1","timeoutMs":1}`)
	if status != 503 || !strings.Contains(string(body), `"code":"unavailable"`) {
		t.Fatalf("mute owner: %d %s", status, body)
	}
}

// docs/design.md §9.5 for the relocation routes: typed errors, nothing changed.
func TestRelocationsBadInput(t *testing.T) {
	m := startMesh(t, 2)
	ctx := context.Background()
	cl, err := client.New(ctx, client.Config{Etcd: m.etcd})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	counterValue(t, cl, "actor/counter/b1", "add", "1")
	revision := func() string { return storeState(t, m.etcd) }
	before := revision()
	for _, tc := range []struct {
		method, query, body string
		status              int
		code                string
	}{
		{"POST", "", "", 400, "invalid_argument"},
		{"POST", "", "not json", 400, "invalid_argument"},
		{"POST", "", `[]`, 400, "invalid_argument"},
		{"POST", "", `{}`, 400, "invalid_argument"},
		{"POST", "", `{"object":""}`, 400, "invalid_argument"},
		{"POST", "", `{"object":"nope"}`, 400, "invalid_argument"},
		{"POST", "", `{"object":"actor/co unter/b1"}`, 400, "invalid_argument"},
		{"POST", "", `{"object":"actor/counter/b1","tgt":"n2"}`, 400, "invalid_argument"},
		{"POST", "", `{"object":"actor/counter/b1"} {}`, 400, "invalid_argument"},
		{"POST", "", `{"object":"actor/counter/b1","timeoutMs":-1}`, 400, "invalid_argument"},
		{"POST", "", `{"object":"actor/counter/b1","timeoutMs":"5s"}`, 400, "invalid_argument"},
		{"POST", "", `{"object":"actor/counter/b1","timeoutMs":600001}`, 400, "invalid_argument"},
		{"POST", "", `{"object":"actor/counter/b1","target":"a/b"}`, 400, "invalid_argument"},
		{"POST", "", `{"object":"actor/counter/b1","foreground":"yes"}`, 400, "invalid_argument"},
		{"POST", "", `{"object":"actor/counter/b1","foreground":1}`, 400, "invalid_argument"},
		{"POST", "", `{"object":"actor/counter/b1","target":"n9"}`, 409, "conflict"},
		{"POST", "?x=1", `{"object":"actor/counter/b1"}`, 400, "invalid_argument"},
		{"POST", "", `{"object":"` + strings.Repeat("x", maxRequestBody) + `"}`, 400, "invalid_argument"},
		{"POST", "", `{"object":"actor/counter/none"}`, 404, "not_found"},
		{"GET", "?inflight=maybe", "", 400, "invalid_argument"},
		{"GET", "?inflight=", "", 400, "invalid_argument"},
		{"GET", "?object=nope", "", 400, "invalid_argument"},
		{"GET", "?objects=actor/counter/b1", "", 400, "invalid_argument"},
		{"GET", "?object=actor/counter/b1&object=actor/counter/b2", "", 400, "invalid_argument"},
		{"PUT", "", `{"object":"actor/counter/b1"}`, 405, "method_not_allowed"},
		{"DELETE", "", "", 405, "method_not_allowed"},
	} {
		req, err := http.NewRequest(tc.method, m.ld.base+"/v1/relocations"+tc.query, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		var eb api.ErrorBody
		if err := json.Unmarshal(b.Bytes(), &eb); err != nil || eb.Error == nil {
			t.Errorf("%s %s %.40q: body %q is not an error body", tc.method, tc.query, tc.body, b.String())
			continue
		}
		if resp.StatusCode != tc.status || eb.Error.Code != tc.code || eb.Error.Message == "" || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s %.40q: %d %s, want %d %s", tc.method, tc.query, tc.body, resp.StatusCode, b.String(), tc.status, tc.code)
		}
		if tc.status == 405 && resp.Header.Get("Allow") != "GET, HEAD, POST" {
			t.Errorf("405 Allow = %q", resp.Header.Get("Allow"))
		}
	}
	if after := revision(); after != before {
		t.Errorf("bad input changed the store: %s → %s", before, after)
	}
	list, _, err := m.ld.api.Relocations(ctx, api.RelocationsQuery{})
	if err != nil || len(list.Relocations) != 0 {
		t.Errorf("bad input started relocations: %+v %v", list, err)
	}
}

// The pool reuses one connection per address, closes idle ones, and close
// ends the calls in flight.
func TestAdminPool(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	block := make(chan struct{})
	rpcpb.RegisterAdminServiceServer(gs, blockingAdmin{block: block})
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	defer func() { close(block); gs.Stop(); <-done }()
	addr := lis.Addr().String()

	p := newAdminPool(50 * time.Millisecond)
	list := func(ctx context.Context) error {
		return p.call(ctx, addr, func(ctx context.Context, c rpcpb.AdminServiceClient) error {
			_, err := c.ListRelocations(ctx, &pb.ListRelocationsRequest{})
			return err
		})
	}
	for range 3 {
		if err := list(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if p.size() != 1 {
		t.Fatalf("pool size %d after 3 calls to one address", p.size())
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.size() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if p.size() != 0 {
		t.Fatal("idle connection not closed")
	}
	// A call in flight (the server blocks) is cancelled by close.
	errc := make(chan error, 1)
	go func() {
		errc <- p.call(context.Background(), addr, func(ctx context.Context, c rpcpb.AdminServiceClient) error {
			_, err := c.Relocate(ctx, &pb.RelocateCommand{Object: "actor/counter/x"})
			return err
		})
	}()
	time.Sleep(100 * time.Millisecond)
	p.close()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("call in flight at close: %v", err)
	}
	if err := list(context.Background()); !errors.Is(err, errNodeUnavailable) {
		t.Fatalf("call after close: %v", err)
	}
	p.close() // idempotent
}

type blockingAdmin struct {
	rpcpb.UnimplementedAdminServiceServer
	block chan struct{}
}

func (blockingAdmin) ListRelocations(context.Context, *pb.ListRelocationsRequest) (*pb.ListRelocationsResponse, error) {
	return &pb.ListRelocationsResponse{}, nil
}

func (b blockingAdmin) Relocate(ctx context.Context, _ *pb.RelocateCommand) (*pb.RelocationStatus, error) {
	select {
	case <-b.block:
	case <-ctx.Done():
	}
	return nil, status.Error(codes.Unavailable, "stopped")
}

func TestSortRelocations(t *testing.T) {
	rs := []api.Relocation{
		{RelocationID: "a", Outcome: "completed", EndedUnixMs: 10},
		{RelocationID: "b", StartedUnixMs: 5},
		{RelocationID: "c", Outcome: "aborted", EndedUnixMs: 30},
		{RelocationID: "d", StartedUnixMs: 9},
		{RelocationID: "a", Outcome: "completed", EndedUnixMs: 10, Role: "target"},
	}
	sortRelocations(rs)
	var got []string
	for _, r := range rs {
		got = append(got, r.RelocationID+r.Role)
	}
	if strings.Join(got, " ") != "d b c a atarget" {
		t.Fatalf("order %v", got)
	}
}
