//go:build failpoints

package node_test

// Helpers of the fault tests (relocate_fault_test.go, seedbug_fault_test.go):
// an in-process mesh whose nodes also host a "slowlist" type (a list whose
// append can take a while, so requests queue behind it at the seal, and
// whose state can be made unrestorable), each node with its own metrics
// registry; failpoints armed for one test; callers that append while a
// relocation runs, and the exactly-once check of what they appended.
//
// Run with: go test -tags failpoints -run 'Fault|SeedBug|Planted' ./pkg/node/

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// ---------------------------------------------------------------- slowlist

const slowListType = "slowlist"

// slowList is a list of strings.
//
//	append V [MS]  → {"length":n}   (sleeps MS milliseconds first)
//	read           → {"items":[...]}
//	poison / heal  → {"ok":true}    (a poisoned state cannot be restored)
type slowList struct{ st slowListState }

type slowListState struct {
	Items  []string `json:"items"`
	Poison bool     `json:"poison,omitempty"`
}

func (s *slowList) Handle(_ actor.Context, method string, args [][]byte) ([]byte, error) {
	switch method {
	case "append":
		if len(args) < 1 || len(args) > 2 {
			return nil, actor.InvalidArgument("append V [MS]")
		}
		if len(args) == 2 {
			ms, err := strconv.Atoi(string(args[1]))
			if err != nil || ms < 0 || ms > 10000 {
				return nil, actor.InvalidArgument("MS %q", args[1])
			}
			slowListStarts.start(string(args[0]))
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
		s.st.Items = append(s.st.Items, string(args[0]))
		slowListRuns.add(string(args[0]))
		return json.Marshal(map[string]int{"length": len(s.st.Items)})
	case "read":
		items := s.st.Items
		if items == nil {
			items = []string{}
		}
		return json.Marshal(map[string][]string{"items": items})
	case "poison", "heal":
		s.st.Poison = method == "poison"
		return []byte(`{"ok":true}`), nil
	}
	return nil, actor.UnknownMethod(slowListType, method)
}

// slowListRuns counts, for the whole test process (every node), how often
// each value was appended by a slowlist handler: an execution whose state
// was discarded afterwards (a target's stage) counts too, which no final
// read can show. Tests use values unique to them.
var slowListRuns = runCounter{n: map[string]int{}}

type runCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *runCounter) add(v string) {
	r.mu.Lock()
	r.n[v]++
	r.mu.Unlock()
}

func (r *runCounter) get(v string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[v]
}

// slowListStarts: a slow append (one with MS) says when its handler began,
// before its sleep, so that a test orders its next call after it without
// guessing a delay. Values are unique to their tests.
var slowListStarts = startSignals{ch: map[string]chan struct{}{}}

type startSignals struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

func (s *startSignals) of(v string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.ch[v]
	if c == nil {
		c = make(chan struct{})
		s.ch[v] = c
	}
	return c
}

func (s *startSignals) start(v string) {
	c := s.of(v)
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-c:
	default:
		close(c)
	}
}

// waitStarted waits until a slow append of v began running.
func waitStarted(t *testing.T, v string) {
	t.Helper()
	select {
	case <-slowListStarts.of(v):
	case <-time.After(10 * time.Second):
		t.Fatalf("the slow append of %q did not start", v)
	}
}

func (s *slowList) Snapshot() ([]byte, error) { return json.Marshal(s.st) }

func (s *slowList) Restore(b []byte) error {
	var st slowListState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("%w: slowlist: %v", actor.ErrCorruptState, err)
	}
	if st.Poison {
		return fmt.Errorf("%w: slowlist: poisoned state", actor.ErrCorruptState)
	}
	s.st = st
	return nil
}

func faultRegistry(t testing.TB) *actor.Registry {
	r := registry(t)
	if err := r.Register(actor.Type{Name: slowListType, New: func() actor.Object { return &slowList{} }}); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(actor.Type{Name: failSnapType, New: func() actor.Object { return &failSnap{} }}); err != nil { // group_fault_test.go
		t.Fatal(err)
	}
	return r
}

// ---------------------------------------------------------------- mesh

// faultMesh is a mesh (node_test.go) whose nodes host slowlist too and whose
// metrics registries the test can read.
type faultMesh struct {
	*mesh
	mu      sync.Mutex
	metrics map[*node.Node]*prometheus.Registry
}

// faultConfig: short fallbacks so that a test waits little.
func faultConfig(_ int, c *node.Config) {
	c.CutoverFallback = 300 * time.Millisecond
	c.BackgroundLatencyTarget = 0 // as in mesh.add
}

func startFaultMesh(t *testing.T, n int, mutate ...func(i int, c *node.Config)) *faultMesh {
	t.Helper()
	failpoint.Reset()
	srv := etcdtest.Single(t)
	fm := &faultMesh{mesh: &mesh{etcd: etcdtest.Client(t, srv.Endpoint()), ep: srv.Endpoint()}, metrics: map[*node.Node]*prometheus.Registry{}}
	for i := range n {
		fm.add(t, fmt.Sprintf("n%d", i+1), mutate...)
	}
	return fm
}

// add starts a node (mesh.add, with faultRegistry and a registry kept for the test).
func (fm *faultMesh) add(t *testing.T, name string, mutate ...func(i int, c *node.Config)) *node.Node {
	t.Helper()
	cfg := node.DefaultConfig()
	cfg.Name = name
	cfg.EtcdEndpoints = []string{fm.ep}
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTP = ""
	cfg.LeaseTTL = 2 * time.Second
	faultConfig(len(fm.nodes), &cfg)
	for _, f := range mutate {
		f(len(fm.nodes), &cfg)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	nd, err := node.New(cfg, node.WithRegistry(faultRegistry(t)), node.WithListener(lis), node.WithMetrics(reg))
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
	fm.mu.Lock()
	fm.nodes = append(fm.nodes, nd)
	fm.metrics[nd] = reg
	fm.mu.Unlock()
	return nd
}

// other returns a node of the mesh other than every one of not.
func (fm *faultMesh) other(t *testing.T, not ...*node.Node) *node.Node {
	t.Helper()
	for _, n := range fm.nodes {
		if !slices.Contains(not, n) {
			return n
		}
	}
	t.Fatal("no other node")
	return nil
}

// record reads the authority record of name.
func (fm *faultMesh) record(t testing.TB, name string) authority.Snapshot {
	t.Helper()
	obj, err := keyspace.ParseObject(name)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	snap, err := authority.New(fm.etcd, keyspace.Default()).Read(ctx, obj)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// routingID is the routing id n advertises in its owner key.
func (fm *faultMesh) routingID(t testing.TB, n *node.Node) wire.RoutingID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := fm.etcd.Get(ctx, n.Keeper().Key())
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("owner key of %s: %v (%d keys)", n.Self(), err, len(r.Kvs))
	}
	d, err := lease.DecodeDescriptor(r.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	rid, err := wire.ParseRoutingIDHex(d.RoutingID)
	if err != nil {
		t.Fatal(err)
	}
	return rid
}

// conn is a gRPC connection to n, closed when the test ends.
func dial(t testing.TB, n *node.Node) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(n.Address(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// ---------------------------------------------------------------- failpoints

// arm enables a failpoint for the rest of the test; every failpoint is
// disarmed when the test ends (before its nodes stop).
func arm(t *testing.T, name, action string) {
	t.Helper()
	if err := failpoint.Enable(name, action); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(failpoint.Reset)
}

// ---------------------------------------------------------------- metrics

// metricSum is the sum of the samples of the counter or gauge name whose
// labels include labels.
func (fm *faultMesh) metricSum(t testing.TB, n *node.Node, name string, labels map[string]string) float64 {
	t.Helper()
	fm.mu.Lock()
	reg := fm.metrics[n]
	fm.mu.Unlock()
	return gatherSum(t, reg, name, labels)
}

// checkOutcomeMetric asserts that n counted exactly one relocation in role,
// with outcome want (the first outcome wins: nothing else was counted).
func (fm *faultMesh) checkOutcomeMetric(t testing.TB, n *node.Node, role, want string) {
	t.Helper()
	got := fm.metricSum(t, n, "meshloc_relocations_total", map[string]string{"role": role, "outcome": want})
	all := fm.metricSum(t, n, "meshloc_relocations_total", map[string]string{"role": role})
	if got != 1 || all != 1 {
		t.Errorf("%s: meshloc_relocations_total{role=%q,outcome=%q} = %v (all outcomes %v), want exactly 1", n.Self(), role, want, got, all)
	}
}

// ---------------------------------------------------------------- statuses

// relocationOf returns n's status of the relocation id in role ("source"
// or "target"), or nil.
func relocationOf(n *node.Node, id []byte, role string) *pb.RelocationStatus {
	for _, st := range n.Relocations() {
		if string(st.GetRelocationId()) == string(id) && st.GetRole() == role {
			return st
		}
	}
	return nil
}

// targetAttempt waits until n has ended a target attempt for object and
// returns its status.
func targetAttempt(t *testing.T, n *node.Node, object string, within time.Duration) *pb.RelocationStatus {
	t.Helper()
	var last *pb.RelocationStatus
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, st := range n.Relocations() {
			if st.GetRole() == "target" && st.GetObject() == object {
				last = st
				if st.GetEndedUnixMs() != 0 {
					return st
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: no ended target attempt for %s within %s (last: %v)", n.Self(), object, within, last)
	return nil
}

// waitPhase waits until n has a relocation of object in role and phase.
func waitPhase(t *testing.T, n *node.Node, object, role, phase string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, st := range n.Relocations() {
			if st.GetRole() == role && st.GetObject() == object && st.GetPhase() == phase && st.GetEndedUnixMs() == 0 {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s: no %s relocation of %s in phase %s within %s: %v", n.Self(), role, object, phase, within, n.Relocations())
}

// relocateAsync runs src.Relocate in the background.
type relocResult struct {
	st  *pb.RelocationStatus
	err error
}

func relocateAsync(src *node.Node, object string, opts node.RelocateOptions) <-chan relocResult {
	ch := make(chan relocResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		st, err := src.Relocate(ctx, object, opts)
		ch <- relocResult{st, err}
	}()
	return ch
}

func waitRelocation(t *testing.T, ch <-chan relocResult, within time.Duration) *pb.RelocationStatus {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("relocate: %v", r.err)
		}
		return r.st
	case <-time.After(within):
		t.Fatalf("relocation did not end within %s", within)
	}
	return nil
}

// ---------------------------------------------------------------- callers

type callResult struct {
	rep *client.Reply
	err error
	at  time.Time
}

// launch calls in the background with a new operation id.
func launch(c *client.Client, object, method string, args ...string) <-chan callResult {
	ch := make(chan callResult, 1)
	go func() {
		rep, err := c.Call(context.Background(), object, method, args...)
		ch <- callResult{rep, err, time.Now()}
	}()
	return ch
}

func await(t *testing.T, what string, ch <-chan callResult) callResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Errorf("%s: %v", what, r.err)
		}
		return r
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no answer within 30s", what)
	}
	return callResult{}
}

// appender appends "<prefix><k>" for k = 0, 1, … one call at a time until
// halted, keeping what was acknowledged and what was attempted.
type appender struct {
	mu        sync.Mutex
	acked     []string
	attempted map[string]bool
	errs      []error
	stop      chan struct{}
	once      sync.Once
	done      chan struct{}
}

func startAppender(t *testing.T, c *client.Client, object, prefix string) *appender {
	a := &appender{attempted: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(a.end) // a test that fails early stops it before its client closes
	go func() {
		defer close(a.done)
		for k := 0; ; k++ {
			select {
			case <-a.stop:
				return
			default:
			}
			v := prefix + strconv.Itoa(k)
			a.mu.Lock()
			a.attempted[v] = true
			a.mu.Unlock()
			_, err := c.Call(context.Background(), object, "append", v)
			a.mu.Lock()
			if err != nil {
				a.errs = append(a.errs, fmt.Errorf("append %s: %w", v, err))
			} else {
				a.acked = append(a.acked, v)
			}
			a.mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return a
}

func (a *appender) end() {
	a.once.Do(func() { close(a.stop) })
	<-a.done
}

// halt stops the appender and returns what was acknowledged.
func (a *appender) halt(t *testing.T) []string {
	t.Helper()
	a.end()
	for _, err := range a.errs {
		t.Errorf("caller: %v", err)
	}
	if len(a.acked) == 0 {
		t.Errorf("caller: no append acknowledged")
	}
	return a.acked
}

func readItems(t *testing.T, c *client.Client, object string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	r, err := c.Call(ctx, object, "read")
	if err != nil {
		t.Fatalf("read %s: %v", object, err)
	}
	var got struct {
		Items []string `json:"items"`
	}
	if err := json.Unmarshal(r.Payload, &got); err != nil {
		t.Fatalf("read %s: %q: %v", object, r.Payload, err)
	}
	return got.Items
}

// checkList asserts that object holds first (the state before the
// relocation), then every acknowledged append of a exactly once, in the order
// acknowledged, and nothing that was not attempted.
func checkList(t *testing.T, c *client.Client, object string, first []string, a *appender, acked []string) {
	t.Helper()
	items := readItems(t, c, object)
	if len(items) < len(first) || !slices.Equal(items[:len(first)], first) {
		t.Fatalf("%s: state before the relocation %q not intact: %q", object, first, items[:min(len(items), len(first)+3)])
	}
	rest := items[len(first):]
	seen := map[string]int{}
	for _, v := range rest {
		seen[v]++
		if seen[v] == 2 {
			t.Errorf("%s: %q executed twice", object, v)
		}
		if a != nil && !a.attempted[v] {
			t.Errorf("%s: %q was never sent", object, v)
		}
	}
	k := 0
	for _, v := range rest {
		if k < len(acked) && v == acked[k] {
			k++
		}
	}
	for _, v := range acked {
		if seen[v] == 0 {
			t.Errorf("%s: acknowledged %q is lost", object, v)
		}
	}
	if k != len(acked) {
		t.Errorf("%s: acknowledged appends out of order (%d of %d in order)", object, k, len(acked))
	}
}

// fill creates a list object (builtin list or slowlist) with items.
func fill(t *testing.T, c *client.Client, object string, items ...string) {
	t.Helper()
	for _, v := range items {
		if _, err := c.Call(context.Background(), object, "append", v); err != nil {
			t.Fatalf("append %s to %s: %v", v, object, err)
		}
	}
}

// serves asserts that n owns object in etcd (active, no intent) and
// answers a call on it.
func (fm *faultMesh) serves(t *testing.T, n *node.Node, c *client.Client, object string) {
	t.Helper()
	snap := fm.record(t, object)
	if snap.Record.Owner != n.Self() || snap.Record.State != "active" || snap.Record.Intent != nil {
		t.Errorf("%s: record %+v, want active and owned by %s", object, snap.Record, n.Self())
	}
	method := "read"
	if strings.HasPrefix(object, "actor/blob/") {
		method = "hash"
	}
	r, err := c.Call(context.Background(), object, method)
	if err != nil {
		t.Errorf("%s: %s: %v", object, method, err)
		return
	}
	if r.Fence.Owner != n.Self() {
		t.Errorf("%s: served by %s, want %s", object, r.Fence.Owner, n.Self())
	}
}

// hostsNothing asserts that n hosts no object (no stage left either).
func hostsNothing(t *testing.T, n *node.Node) {
	t.Helper()
	if h := n.Hosted(); h != 0 {
		t.Errorf("%s hosts %d objects, want none", n.Self(), h)
	}
}
