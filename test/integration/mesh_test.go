package integration

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// meshTTL is the nodes' --lease-ttl.
const meshTTL = 2 * time.Second

// meshNode is one meshnode process.
type meshNode struct {
	name string
	addr string // gRPC
	http string // /metrics, /healthz
	gen  int64  // owner generation, once serving
	p    *process
}

// mesh is locationd (with its embedded etcd) and meshnode processes.
type mesh struct {
	locationd *process
	etcdURL   string
	api       *client.Admin
	hc        *http.Client
	nodes     []*meshNode
}

// startMesh starts locationd and n meshnodes n1..nn, and waits until
// /v1/owners lists every node as serving. Every process is stopped when the
// test ends: the nodes together (SIGTERM), then locationd.
func startMesh(t *testing.T, n int) *mesh {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	lp, etcdURL, cl := startLocationd(t)
	m := &mesh{locationd: lp, etcdURL: etcdURL, api: cl, hc: httpClient(t)}
	bin := binary(t, "meshnode")
	procs := []*process{lp}
	for i := range n {
		nd := &meshNode{name: fmt.Sprintf("n%d", i+1), addr: freeAddr(t), http: freeAddr(t)}
		nd.p = startProcess(t, nd.name, bin,
			"--name", nd.name,
			"--etcd-endpoints", etcdURL,
			"--listen", nd.addr,
			"--http", nd.http,
			"--lease-ttl", meshTTL.String(),
		)
		m.nodes = append(m.nodes, nd)
		procs = append(procs, nd.p)
	}
	// Runs before the processes' own cleanups (which then have nothing to do).
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, nd := range m.nodes {
			wg.Go(func() {
				if err := nd.p.stop(stopTimeout); err != nil {
					t.Errorf("%s: %v", nd.name, err)
				}
			})
		}
		wg.Wait()
	})
	waitFor(t, time.Minute, "every node serving", func(ctx context.Context) error {
		r, _, err := cl.Owners(ctx)
		if err != nil {
			return err
		}
		for _, nd := range m.nodes {
			i := slices.IndexFunc(r.Owners, func(o api.Owner) bool { return o.ID == nd.name })
			if i < 0 {
				return fmt.Errorf("%s not in /v1/owners", nd.name)
			}
			o := r.Owners[i]
			if o.State != "serving" || o.Address != nd.addr {
				return fmt.Errorf("%s is %s at %s", nd.name, o.State, o.Address)
			}
			nd.gen = o.Generation
		}
		return nil
	}, procs...)
	return m
}

func (m *mesh) addrs() []string {
	var out []string
	for _, nd := range m.nodes {
		out = append(out, nd.addr)
	}
	return out
}

func (m *mesh) node(name string) *meshNode {
	for _, nd := range m.nodes {
		if nd.name == name {
			return nd
		}
	}
	return nil
}

// objects lists the authority records through locationd.
func (m *mesh) objects(t *testing.T, q api.ObjectsQuery) []api.Object {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, _, err := m.api.Objects(ctx, q)
	if err != nil {
		t.Fatalf("/v1/objects: %v", err)
	}
	return r.Objects
}

func (m *mesh) object(t *testing.T, name string) api.ObjectResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, _, err := m.api.Object(ctx, name)
	if err != nil {
		t.Fatalf("/v1/objects/%s: %v", name, err)
	}
	return r
}

// healthz GETs a node's /healthz.
func (m *mesh) healthz(nd *meshNode) error {
	resp, err := m.hc.Get("http://" + nd.http + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz of %s: %s", nd.name, resp.Status)
	}
	return nil
}

func newClient(t *testing.T, cfg client.Config) *client.Client {
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

func counterValue(r *client.Reply) (int64, error) {
	var v struct {
		Value *int64 `json:"value"`
	}
	if err := json.Unmarshal(r.Payload, &v); err != nil || v.Value == nil {
		return 0, fmt.Errorf("not a counter reply: %q (%v)", r.Payload, err)
	}
	return *v.Value, nil
}

// add calls `add 1` on a counter and returns the value it answered.
func add(ctx context.Context, c *client.Client, obj string) (int64, error) {
	r, err := c.Call(ctx, obj, "add", "1")
	if err != nil {
		return 0, err
	}
	return counterValue(r)
}

func isCode(err error, code pb.Code) bool {
	var we *wire.Error
	return errors.As(err, &we) && we.Code == code
}

// TestMeshCalls: 1,000 calls through random gateways on 100 counters, from
// 8 workers that each own a disjoint set of counters, so every reply must be
// exactly the number of adds done so far; then every counter has exactly one
// record, owned by a live node, and the counters are spread over nodes. A
// list appended to through different gateways reads back exactly, in order.
func TestMeshCalls(t *testing.T) {
	m := startMesh(t, 3)
	ctx := context.Background()
	c := newClient(t, client.Config{Nodes: m.addrs()})

	const objects, calls, workers = 100, 1000, 8
	name := func(i int) string { return fmt.Sprintf("actor/counter/c%d", i) }
	adds := make([]int64, objects) // adds[i] is touched only by worker i%workers
	var mu sync.Mutex
	perServer := map[string]int{}
	errs := make(chan error, workers)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var mine []int
			for i := w; i < objects; i += workers {
				mine = append(mine, i)
			}
			rng := mrand.New(mrand.NewPCG(uint64(w), 42))
			for k := range calls / workers {
				i := mine[rng.IntN(len(mine))]
				if k < len(mine) {
					i = mine[k] // every counter is called at least once
				}
				r, err := c.Call(ctx, name(i), "add", "1")
				if err != nil {
					errs <- fmt.Errorf("worker %d: %s add 1 (after %d adds): %w", w, name(i), adds[i], err)
					return
				}
				adds[i]++
				v, err := counterValue(r)
				if err != nil || v != adds[i] {
					errs <- fmt.Errorf("worker %d: %s add 1 answered %d (%v), want %d", w, name(i), v, err, adds[i])
					return
				}
				mu.Lock()
				perServer[r.Node]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	var total int64
	for _, a := range adds {
		total += a
	}
	if total != calls {
		t.Fatalf("%d adds done, want %d", total, calls)
	}
	t.Logf("%d calls in %v; replies per serving owner: %v", calls, time.Since(start).Round(time.Millisecond), perServer)

	// Exactly one record per counter, owned by a live node (the pair:
	// id and generation), and the same owner the replies came from.
	live := map[authority.OwnerRef]bool{}
	for _, nd := range m.nodes {
		live[authority.OwnerRef{ID: nd.name, Generation: nd.gen}] = true
	}
	perOwner := map[string]int{}
	seen := map[string]bool{}
	for _, o := range m.objects(t, api.ObjectsQuery{Kind: "actor"}) {
		if o.Record.Type != "counter" {
			t.Errorf("unexpected record %s", o.Object)
			continue
		}
		if seen[o.Object] {
			t.Errorf("%s listed twice", o.Object)
		}
		seen[o.Object] = true
		rec := o.Record
		if !live[rec.Owner] || !o.OwnerAlive || rec.State != authority.StateActive || rec.ObjectGeneration != 1 || rec.AuthorityGeneration != 1 {
			t.Errorf("%s: owner %s alive=%v state %s generations %d/%d", o.Object, rec.Owner, o.OwnerAlive, rec.State, rec.ObjectGeneration, rec.AuthorityGeneration)
		}
		if f, ok := c.Fence(o.Object); !ok || f.Owner != rec.Owner {
			t.Errorf("%s: record owner %s, replies served by %v (%v)", o.Object, rec.Owner, f.Owner, ok)
		}
		perOwner[rec.Owner.ID]++
	}
	if len(seen) != objects {
		t.Errorf("%d counter records, want %d", len(seen), objects)
	}
	if len(perOwner) < 2 {
		t.Errorf("every counter was placed on one node: %v", perOwner)
	}
	t.Logf("counters per owner: %v", perOwner)

	// Every counter holds exactly its adds.
	for i := range objects {
		r, err := c.Call(ctx, name(i), "get")
		if err != nil {
			t.Fatalf("%s get: %v", name(i), err)
		}
		if v, err := counterValue(r); err != nil || v != adds[i] {
			t.Errorf("%s get = %d (%v), want %d", name(i), v, err, adds[i])
		}
	}

	// A list appended to through each gateway in turn.
	gws := make([]*client.Client, len(m.nodes))
	for i, nd := range m.nodes {
		gws[i] = newClient(t, client.Config{Nodes: []string{nd.addr}})
	}
	const list, appends = "actor/list/l1", 30
	var want []string
	for k := range appends {
		v := fmt.Sprintf("v%02d", k)
		r, err := gws[k%len(gws)].Call(ctx, list, "append", v)
		if err != nil {
			t.Fatalf("append %s via %s: %v", v, m.nodes[k%len(gws)].name, err)
		}
		want = append(want, v)
		var got struct{ Length int }
		if err := json.Unmarshal(r.Payload, &got); err != nil || got.Length != len(want) {
			t.Fatalf("append %s answered %s, want length %d", v, r.Payload, len(want))
		}
	}
	for i, gw := range gws {
		r, err := gw.Call(ctx, list, "read")
		if err != nil {
			t.Fatalf("read via %s: %v", m.nodes[i].name, err)
		}
		var got struct{ Items []string }
		if err := json.Unmarshal(r.Payload, &got); err != nil || !slices.Equal(got.Items, want) {
			t.Errorf("read via %s: %s, want %q", m.nodes[i].name, r.Payload, want)
		}
	}
	if n := len(m.objects(t, api.ObjectsQuery{})); n != objects+1 {
		t.Errorf("%d records in all, want %d", n, objects+1)
	}
}

// TestMeshOwnerKilled: SIGKILL an owner. locationd reports its objects
// orphaned once its lease expires; then the first call of each of them is
// answered STATE_LOST (by a node that re-creates it with a larger object
// generation), never as a silent reset, and the next call serves a fresh
// object.
func TestMeshOwnerKilled(t *testing.T) {
	m := startMesh(t, 3)
	ctx := context.Background()
	c1 := newClient(t, client.Config{Nodes: m.addrs()})

	// Activate counters until every node owns at least two.
	var names []string
	for i := 0; ; i++ {
		if i == 90 {
			t.Fatalf("90 counters and a node owns fewer than 2: %v", m.objects(t, api.ObjectsQuery{}))
		}
		obj := fmt.Sprintf("actor/counter/k%d", i)
		if v, err := add(ctx, c1, obj); err != nil || v != 1 {
			t.Fatalf("%s add 1 = %d, %v", obj, v, err)
		}
		names = append(names, obj)
		if i < 30 {
			continue
		}
		per := map[string]int{}
		for _, o := range m.objects(t, api.ObjectsQuery{}) {
			per[o.Record.Owner.ID]++
		}
		if len(per) == len(m.nodes) && slices.Min(mapValues(per)) >= 2 {
			break
		}
	}
	before := map[string]api.Object{}
	per := map[string][]string{}
	for _, o := range m.objects(t, api.ObjectsQuery{}) {
		before[o.Object] = o
		per[o.Record.Owner.ID] = append(per[o.Record.Owner.ID], o.Object)
	}
	victim := m.nodes[0]
	for _, nd := range m.nodes {
		if len(per[nd.name]) > len(per[victim.name]) {
			victim = nd
		}
	}
	lost := per[victim.name]
	sort.Strings(lost)
	t.Logf("objects per owner: n1 %d, n2 %d, n3 %d; killing %s@%d, the owner of %d",
		len(per["n1"]), len(per["n2"]), len(per["n3"]), victim.name, victim.gen, len(lost))
	for _, obj := range lost {
		if f, ok := c1.Fence(obj); !ok || f.Owner.ID != victim.name || f.ObjectGeneration != 1 {
			t.Fatalf("client's fence of %s: %+v %v", obj, f, ok)
		}
	}

	killed := time.Now()
	victim.p.kill()
	var orphanedAfter time.Duration
	waitFor(t, 30*time.Second, "objects of the killed node reported orphaned", func(ctx context.Context) error {
		r, _, err := m.api.Objects(ctx, api.ObjectsQuery{Owner: victim.name, Orphaned: new(true)})
		if err != nil {
			return err
		}
		var got []string
		for _, o := range r.Objects {
			got = append(got, o.Object)
		}
		sort.Strings(got)
		if !slices.Equal(got, lost) {
			return fmt.Errorf("orphaned: %d of %d", len(got), len(lost))
		}
		orphanedAfter = time.Since(killed)
		return nil
	}, m.locationd)
	t.Logf("orphaned reported %v after SIGKILL (TTL %v)", orphanedAfter.Round(time.Millisecond), meshTTL)
	if limit := meshTTL + 5*time.Second; orphanedAfter > limit {
		t.Errorf("orphaned reported %v after SIGKILL, beyond TTL + 5s = %v", orphanedAfter, limit)
	}
	// The other nodes' objects are not orphaned.
	if o := m.objects(t, api.ObjectsQuery{Orphaned: new(true)}); len(o) != len(lost) {
		t.Errorf("%d orphaned objects, want %d", len(o), len(lost))
	}
	// recovered checks that obj's record was re-created on a live node
	// other than the victim with a larger object generation.
	recovered := func(obj string) {
		t.Helper()
		r := m.object(t, obj)
		old := before[obj].Record
		if r.Record.ObjectGeneration <= old.ObjectGeneration || !r.OwnerAlive || r.Record.Owner.ID == victim.name ||
			m.node(r.Record.Owner.ID) == nil || r.Record.Owner.Generation != m.node(r.Record.Owner.ID).gen {
			t.Errorf("%s after recovery: owner %s alive=%v objectGeneration %d (was %d)",
				obj, r.Record.Owner, r.OwnerAlive, r.Record.ObjectGeneration, old.ObjectGeneration)
		}
	}

	// A brand-new client (it remembers nothing) makes the recovering call of
	// an object nobody re-created yet: STATE_LOST all the same.
	fresh, rest := lost[0], lost[1:]
	c2 := newClient(t, client.Config{Nodes: m.addrs()})
	if _, err := add(ctx, c2, fresh); !isCode(err, pb.Code_CODE_STATE_LOST) {
		t.Fatalf("new client, first call of orphaned %s: %v, want state_lost", fresh, err)
	} else {
		t.Logf("first call of %s: %v", fresh, err)
	}
	recovered(fresh)
	if v, err := add(ctx, c2, fresh); err != nil || v != 1 {
		t.Errorf("new client, second call of %s: add 1 = %d, %v; want 1", fresh, v, err)
	}

	// The client that called them before the kill: STATE_LOST once each,
	// then a fresh counter.
	for _, obj := range rest {
		if _, err := add(ctx, c1, obj); !isCode(err, pb.Code_CODE_STATE_LOST) {
			t.Errorf("first call of orphaned %s: %v, want state_lost", obj, err)
			continue
		}
		recovered(obj)
		if v, err := add(ctx, c1, obj); err != nil || v != 1 {
			t.Errorf("second call of %s: add 1 = %d, %v; want 1", obj, v, err)
		}
		if f, _ := c1.Fence(obj); f.ObjectGeneration != m.object(t, obj).Record.ObjectGeneration {
			t.Errorf("%s: client's fence %+v, record generation %d", obj, f, m.object(t, obj).Record.ObjectGeneration)
		}
	}
	// The first client also learns that the object the second one re-created
	// lost its state: the fence it remembers is of the old generation, and a
	// gateway must not replace the generation the caller knows by a newer
	// one it saw itself (that would reset the caller's state silently).
	t.Run("old fence after another client re-created it", func(t *testing.T) {
		if f, _ := c1.Fence(fresh); f.ObjectGeneration != 1 {
			t.Fatalf("client's fence of %s: %+v", fresh, f)
		}
		if v, err := add(ctx, c1, fresh); !isCode(err, pb.Code_CODE_STATE_LOST) {
			t.Errorf("first call of %s, re-created by another client, from a client that saw generation 1: "+
				"add 1 = %d, %v; want state_lost", fresh, v, err)
		}
	})
	if v, err := add(ctx, c1, fresh); err != nil || v < 2 {
		t.Errorf("old client, call of %s: add 1 = %d, %v; want >= 2", fresh, v, err)
	}

	// The survivors' objects kept their state.
	for _, obj := range names {
		if slices.Contains(lost, obj) {
			continue
		}
		if v, err := add(ctx, c1, obj); err != nil || v != 2 {
			t.Errorf("%s (owner alive) add 1 = %d, %v; want 2", obj, v, err)
		}
		if r := m.object(t, obj); r.Record.ObjectGeneration != 1 || r.Record.Owner != before[obj].Record.Owner {
			t.Errorf("%s (owner alive) changed: %+v", obj, r.Record)
		}
	}
	if o := m.objects(t, api.ObjectsQuery{Orphaned: new(true)}); len(o) != 0 {
		t.Errorf("still orphaned: %v", o)
	}
}

func mapValues(m map[string]int) []int {
	var out []int
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// rawCodec sends and receives bytes as they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = b
	return nil
}
func (rawCodec) Name() string { return "proto" }

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// TestMeshBadInputRaw: bytes that are not a protobuf sent to a node's call
// service, and garbage over raw TCP connections to its gRPC and HTTP ports,
// get errors and change nothing: the process keeps running and serving.
func TestMeshBadInputRaw(t *testing.T) {
	m := startMesh(t, 1)
	nd := m.nodes[0]
	ctx := context.Background()
	c := newClient(t, client.Config{Nodes: m.addrs()})
	const obj = "actor/counter/b"
	if v, err := add(ctx, c, obj); err != nil || v != 1 {
		t.Fatalf("add 1 = %d, %v", v, err)
	}

	conn, err := grpc.NewClient(nd.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	invoke := func(method string, in []byte) ([]byte, error) {
		ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var out []byte
		err := conn.Invoke(ictx, method, in, &out, grpc.ForceCodec(rawCodec{}))
		return out, err
	}
	// Not a protobuf: a typed gRPC error.
	if _, err := invoke(rpcpb.CallService_Call_FullMethodName, []byte{0xff, 0xff, 0xff, 0x07, 0x01}); status.Code(err) != codes.Internal && status.Code(err) != codes.InvalidArgument {
		t.Errorf("malformed protobuf: %v", err)
	}
	if _, err := invoke("/meshloc.rpc.v1.CallService/Nope", randomBytes(16)); status.Code(err) != codes.Unimplemented {
		t.Errorf("unknown method: %v", err)
	}
	// Random bytes: a gRPC error when they do not decode, else a typed
	// refusal (they never make a valid request).
	decoded := 0
	for i := range 200 {
		in := randomBytes(1 + i*7%600)
		out, err := invoke(rpcpb.CallService_Call_FullMethodName, in)
		if err != nil {
			if c := status.Code(err); c != codes.Internal && c != codes.InvalidArgument {
				t.Errorf("random request %x: %v", in, err)
			}
			continue
		}
		decoded++
		var rep pb.CallReply
		if err := proto.Unmarshal(out, &rep); err != nil || rep.GetCode() == pb.Code_CODE_OK || rep.GetCode() == pb.Code_CODE_UNSPECIFIED {
			t.Errorf("random request %x answered %v (%v)", in, rep.GetCode(), err)
		}
	}
	// Well-formed protobufs that are not valid requests: typed refusals.
	op := wire.NewOperationID()
	for _, tc := range []struct {
		req  *pb.CallRequest
		want pb.Code
	}{
		{&pb.CallRequest{}, pb.Code_CODE_PROTOCOL_ERROR},
		{&pb.CallRequest{Version: 9, Object: obj, Method: "get", OperationId: op[:]}, pb.Code_CODE_PROTOCOL_ERROR},
		{&pb.CallRequest{Version: wire.Version, Object: obj, Method: "get"}, pb.Code_CODE_INVALID_OPERATION_ID},
		{&pb.CallRequest{Version: wire.Version, Object: obj, Method: "get", OperationId: make([]byte, 16)}, pb.Code_CODE_INVALID_OPERATION_ID},
		{&pb.CallRequest{Version: wire.Version, Object: obj, Method: "add", Args: [][]byte{[]byte("x")}, OperationId: op[:]}, pb.Code_CODE_INVALID_ARGUMENT},
		{&pb.CallRequest{Version: wire.Version, Object: "actor/counter/\x00", Method: "get", OperationId: op[:]}, pb.Code_CODE_INVALID_ARGUMENT},
		{&pb.CallRequest{Version: wire.Version, Object: obj, Method: "get", OperationId: op[:], Hops: 99}, pb.Code_CODE_UNAVAILABLE},
	} {
		in, err := proto.Marshal(tc.req)
		if err != nil {
			t.Fatal(err)
		}
		out, err := invoke(rpcpb.CallService_Call_FullMethodName, in)
		var rep pb.CallReply
		if err == nil {
			err = proto.Unmarshal(out, &rep)
		}
		if err != nil || rep.GetCode() != tc.want {
			t.Errorf("request %v: %v (%s) %v, want %v", tc.req, rep.GetCode(), rep.GetMessage(), err, tc.want)
		}
	}
	for _, method := range []string{rpcpb.PeerService_RelayReply_FullMethodName, rpcpb.PeerService_Relocate_FullMethodName} {
		if _, err := invoke(method, randomBytes(64)); err == nil || status.Code(err) == codes.Unavailable {
			t.Errorf("garbage to %s: %v", method, err)
		}
	}

	// Garbage over raw TCP, to the gRPC and the HTTP port.
	preface := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	for _, addr := range []string{nd.addr, nd.http} {
		for _, payload := range [][]byte{
			randomBytes(64 << 10),
			append(append([]byte{}, preface...), randomBytes(4<<10)...),
			preface[:10],
			[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
			append([]byte("POST /meshloc.rpc.v1.CallService/Call HTTP/1.1\r\nContent-Length: 100000\r\n\r\n"), randomBytes(100)...),
		} {
			tc, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatalf("dial %s: %v", addr, err)
			}
			_ = tc.SetDeadline(time.Now().Add(200 * time.Millisecond))
			_, _ = tc.Write(payload) // the node may close first
			_, _ = tc.Read(make([]byte, 1024))
			tc.Close()
		}
	}
	t.Logf("%d of 200 random requests decoded as a protobuf; all refused", decoded)

	// Still alive, still serving, nothing changed.
	if !nd.p.alive() {
		t.Fatalf("the node exited: %v", nd.p.err)
	}
	if err := m.healthz(nd); err != nil {
		t.Errorf("healthz: %v", err)
	}
	if v, err := add(ctx, c, obj); err != nil || v != 2 {
		t.Errorf("add 1 after bad input = %d, %v; want 2", v, err)
	}
	objs := m.objects(t, api.ObjectsQuery{})
	if len(objs) != 1 || objs[0].Object != obj || objs[0].Record.ObjectGeneration != 1 {
		t.Errorf("records after bad input: %+v", objs)
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, _, err := m.api.Owners(octx)
	if err != nil || len(r.Owners) != 1 || r.Owners[0].Generation != nd.gen || r.Owners[0].State != "serving" {
		t.Errorf("owners after bad input: %+v %v", r.Owners, err)
	}
}
