package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type mesh struct {
	etcd  *clientv3.Client
	nodes []*node.Node
	ep    string
	regs  map[*node.Node]*prometheus.Registry // each node's metrics
	types []actor.Type                        // registered beside the builtin ones on nodes added from now on
}

func registry(t testing.TB) *actor.Registry {
	r := actor.NewRegistry()
	if err := builtin.Register(r); err != nil {
		t.Fatal(err)
	}
	return r
}

// startMesh starts an embedded etcd and n in-process nodes on loopback.
func startMesh(t testing.TB, n int, mutate ...func(i int, c *node.Config)) *mesh {
	t.Helper()
	srv := etcdtest.Single(t)
	m := &mesh{etcd: etcdtest.Client(t, srv.Endpoint()), ep: srv.Endpoint()}
	for i := range n {
		m.add(t, fmt.Sprintf("n%d", i+1), mutate...)
	}
	return m
}

func (m *mesh) add(t testing.TB, name string, mutate ...func(i int, c *node.Config)) *node.Node {
	t.Helper()
	cfg := node.DefaultConfig()
	cfg.Name = name
	cfg.EtcdEndpoints = []string{m.ep}
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTP = ""
	// 5 s: tests share a loaded 2-core machine with other packages' tests; a
	// 2 s lease can lapse under that load and fence a node mid-test.
	cfg.LeaseTTL = 5 * time.Second
	// Relocations start when a test asks, however loaded the machine: the
	// pacing of background relocations has its own tests (pacing_test.go),
	// which turn it on.
	cfg.BackgroundLatencyTarget = 0
	for _, f := range mutate {
		f(len(m.nodes), &cfg)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	types := registry(t)
	for _, ty := range m.types {
		if err := types.Register(ty); err != nil {
			t.Fatal(err)
		}
	}
	nd, err := node.New(cfg, node.WithRegistry(types), node.WithListener(lis), node.WithMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := nd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = nd.Stop(sctx)
	})
	m.nodes = append(m.nodes, nd)
	if m.regs == nil {
		m.regs = map[*node.Node]*prometheus.Registry{}
	}
	m.regs[nd] = reg
	return nd
}

// metric is the sum of the samples of counter or gauge name on n.
func (m *mesh) metric(t testing.TB, n *node.Node, name string) float64 {
	t.Helper()
	return gatherSum(t, m.regs[n], name, nil)
}

// metricWith is metric over the samples whose labels include labels.
func (m *mesh) metricWith(t testing.TB, n *node.Node, name string, labels map[string]string) float64 {
	t.Helper()
	return gatherSum(t, m.regs[n], name, labels)
}

// gatherSum is the sum of the samples of counter or gauge name in reg
// whose labels include labels.
func gatherSum(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, x := range mf.GetMetric() {
			if hasLabels(x.GetLabel(), labels) {
				sum += x.GetCounter().GetValue() + x.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func hasLabels(have []*dto.LabelPair, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range have {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func (m *mesh) addrs() []string {
	var out []string
	for _, n := range m.nodes {
		out = append(out, n.Address())
	}
	return out
}

func newClient(t testing.TB, cfg client.Config) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func value(t testing.TB, r *client.Reply) int64 {
	var v struct{ Value int64 }
	if err := json.Unmarshal(r.Payload, &v); err != nil {
		t.Fatalf("reply %s: %v", r.Payload, err)
	}
	return v.Value
}

// Calls through any node reach the single owner; each object has one record.
func TestCallsThroughAnyNode(t *testing.T) {
	m := startMesh(t, 3)
	gw := newClient(t, client.Config{Nodes: m.addrs()})
	direct := newClient(t, client.Config{Etcd: m.etcd})
	ctx := context.Background()
	const objects, rounds = 30, 4
	var wg sync.WaitGroup
	errs := make(chan error, objects)
	for i := range objects {
		wg.Go(func() {
			obj := fmt.Sprintf("actor/counter/c%d", i)
			for k := 1; k <= rounds; k++ {
				c := gw
				if k%2 == 0 {
					c = direct
				}
				r, err := c.Call(ctx, obj, "add", "1")
				if err != nil {
					errs <- fmt.Errorf("%s add %d: %w", obj, k, err)
					return
				}
				if v := value(t, r); v != int64(k) {
					errs <- fmt.Errorf("%s: add %d answered %d", obj, k, v)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	recs, _, err := authority.New(m.etcd, keyspace.Default()).List(ctx, authority.ListOptions{})
	if err != nil || len(recs) != objects {
		t.Fatalf("records: %d (%v), want %d", len(recs), err, objects)
	}
	perOwner := map[string]int{}
	for _, r := range recs {
		perOwner[r.Record.Owner.ID]++
	}
	if len(perOwner) < 2 {
		t.Errorf("placement put every object on one node: %v", perOwner)
	}
	t.Logf("objects per owner: %v", perOwner)
}

// A retried operation id executes once and returns the first reply.
func TestRetryExecutesOnce(t *testing.T) {
	m := startMesh(t, 2)
	c := newClient(t, client.Config{Nodes: m.addrs()})
	ctx := context.Background()
	op := wire.NewOperationID()
	first, err := c.CallOp(ctx, op, "actor/list/l1", "append", [][]byte{[]byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		again, err := c.CallOp(ctx, op, "actor/list/l1", "append", [][]byte{[]byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		if string(again.Payload) != string(first.Payload) || !again.Replayed {
			t.Fatalf("retry answered %s (replayed=%v), first was %s", again.Payload, again.Replayed, first.Payload)
		}
	}
	r, err := c.Call(ctx, "actor/list/l1", "read")
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Items []string }
	_ = json.Unmarshal(r.Payload, &got)
	if len(got.Items) != 1 {
		t.Fatalf("list after 4 sends of one operation: %v", got.Items)
	}
}

// Bad input gets a typed error and the node keeps serving.
func TestBadInput(t *testing.T) {
	m := startMesh(t, 1)
	conn, err := grpc.NewClient(m.nodes[0].Address(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cs := rpcpb.NewCallServiceClient(conn)
	ctx := context.Background()
	op := wire.NewOperationID()
	good := func() *pb.CallRequest {
		return &pb.CallRequest{Version: wire.Version, Object: "actor/counter/b", Method: "get", OperationId: op[:]}
	}
	cases := []struct {
		name string
		mut  func(r *pb.CallRequest)
		want pb.Code
	}{
		{"zero operation id", func(r *pb.CallRequest) { r.OperationId = make([]byte, 16) }, pb.Code_CODE_INVALID_OPERATION_ID},
		{"short operation id", func(r *pb.CallRequest) { r.OperationId = []byte{1, 2} }, pb.Code_CODE_INVALID_OPERATION_ID},
		{"unknown type", func(r *pb.CallRequest) { r.Object = "actor/nosuch/x" }, pb.Code_CODE_UNKNOWN_TYPE},
		{"unknown kind", func(r *pb.CallRequest) { r.Object = "thing/x" }, pb.Code_CODE_UNKNOWN_KIND},
		{"bad name", func(r *pb.CallRequest) { r.Object = "actor/counter/a b" }, pb.Code_CODE_INVALID_ARGUMENT},
		{"unknown method", func(r *pb.CallRequest) { r.Method = "explode" }, pb.Code_CODE_UNKNOWN_METHOD},
		{"payload over limit", func(r *pb.CallRequest) { r.Args = [][]byte{make([]byte, wire.MaxArgsBytes+1)} }, pb.Code_CODE_PAYLOAD_TOO_LARGE},
		{"wrong version", func(r *pb.CallRequest) { r.Version = 9 }, pb.Code_CODE_PROTOCOL_ERROR},
		{"bad argument", func(r *pb.CallRequest) { r.Method = "add"; r.Args = [][]byte{[]byte("one")} }, pb.Code_CODE_INVALID_ARGUMENT},
	}
	for _, tc := range cases {
		r := good()
		tc.mut(r)
		op2 := wire.NewOperationID()
		if tc.want != pb.Code_CODE_INVALID_OPERATION_ID {
			r.OperationId = op2[:]
		}
		rep, err := cs.Call(ctx, r)
		if err != nil {
			t.Errorf("%s: transport error %v", tc.name, err)
			continue
		}
		if rep.GetCode() != tc.want {
			t.Errorf("%s: code %v (%s), want %v", tc.name, rep.GetCode(), rep.GetMessage(), tc.want)
		}
	}
	// Raw bytes that are not a protobuf: a typed gRPC error, no crash.
	var out []byte
	err = conn.Invoke(ctx, "/meshloc.rpc.v1.CallService/Call", []byte{0xff, 0xff, 0xff, 0x07, 0x01}, &out, grpc.ForceCodec(rawCodec{}))
	if status.Code(err) != codes.Internal && status.Code(err) != codes.InvalidArgument {
		t.Errorf("malformed protobuf: %v", err)
	}
	err = conn.Invoke(ctx, "/meshloc.rpc.v1.CallService/Nope", []byte{}, &out, grpc.ForceCodec(rawCodec{}))
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("unknown rpc: %v", err)
	}
	// Still serving.
	rep, err := cs.Call(ctx, good())
	if err != nil || rep.GetCode() != pb.Code_CODE_OK {
		t.Fatalf("node stopped serving after bad input: %v %v", rep, err)
	}
	// Nothing was created by the bad requests.
	recs, _, _ := authority.New(m.etcd, keyspace.Default()).List(ctx, authority.ListOptions{})
	if len(recs) != 1 {
		t.Fatalf("bad input created records: %d", len(recs))
	}
}

type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = b
	return nil
}
func (rawCodec) Name() string { return "proto" }

// --advertise-http is what the owner descriptor publishes (a node
// listening on 0.0.0.0 publishes a reachable address).
func TestAdvertiseHTTPPublished(t *testing.T) {
	m := startMesh(t, 1, func(_ int, c *node.Config) { c.AdvertiseHTTP = "meshnode1:7101" })
	resp, err := m.etcd.Get(t.Context(), "/meshloc/default/owners/n1")
	if err != nil || len(resp.Kvs) != 1 || !strings.Contains(string(resp.Kvs[0].Value), `"http":"meshnode1:7101"`) {
		t.Fatalf("owner descriptor %v (%v)", resp, err)
	}
}
