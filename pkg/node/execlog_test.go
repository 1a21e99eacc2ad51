package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/node/execlog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/verify"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/wire"
)

// xslowType is a counter whose add can take a while, so that requests queue
// behind it when a relocation seals it (captured, replayed on the target).
//
//	add N [MS] → {"value":v}   (sleeps MS milliseconds first)
const xslowType = "xslow"

type xslow struct{ V int64 }

func (x *xslow) Handle(_ actor.Context, method string, args [][]byte) ([]byte, error) {
	if method != "add" || len(args) < 1 || len(args) > 2 {
		return nil, actor.InvalidArgument("add N [MS]")
	}
	n, err := strconv.ParseInt(string(args[0]), 10, 64)
	if err != nil {
		return nil, actor.InvalidArgument("N %q", args[0])
	}
	if len(args) == 2 {
		ms, err := strconv.Atoi(string(args[1]))
		if err != nil || ms < 0 || ms > 5000 {
			return nil, actor.InvalidArgument("MS %q", args[1])
		}
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}
	x.V += n
	return json.Marshal(map[string]int64{"value": x.V})
}

func (x *xslow) Snapshot() ([]byte, error) { return json.Marshal(x) }
func (x *xslow) Restore(b []byte) error    { return json.Unmarshal(b, x) }

// startExecMesh starts an embedded etcd and n nodes (builtin types and
// xslow), node i logging its executions to logs[i].
func startExecMesh(t *testing.T, n int) (*mesh, []string, []*prometheus.Registry) {
	t.Helper()
	srv := etcdtest.Single(t)
	m := &mesh{etcd: etcdtest.Client(t, srv.Endpoint()), ep: srv.Endpoint()}
	dir := t.TempDir()
	var logs []string
	var regs []*prometheus.Registry
	for i := range n {
		cfg := node.DefaultConfig()
		cfg.Name = fmt.Sprintf("n%d", i+1)
		cfg.EtcdEndpoints = []string{m.ep}
		cfg.Listen = "127.0.0.1:0"
		cfg.HTTP = ""
		cfg.LeaseTTL = 5 * time.Second
		cfg.ExecLog = filepath.Join(dir, cfg.Name+".log")
		logs = append(logs, cfg.ExecLog)
		reg := registry(t)
		if err := reg.Register(actor.Type{Name: xslowType, New: func() actor.Object { return &xslow{} }}); err != nil {
			t.Fatal(err)
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, prometheus.NewRegistry())
		nd, err := node.New(cfg, node.WithRegistry(reg), node.WithListener(lis), node.WithMetrics(regs[i]))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = nd.Start(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = nd.Stop(sctx)
		})
		m.nodes = append(m.nodes, nd)
	}
	return m, logs, regs
}

// counterValue is the value of the counter name in reg (0: absent).
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var v float64
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
			return v
		}
	}
	return 0
}

// execSeen is where the logs say an operation ran.
type execSeen struct {
	owner string
	fence verify.FenceKey
}

// Every executed request is logged once, by the owner that ran it, under the
// fence its reply carries: direct calls, calls through a gateway, requests
// captured at a relocation's seal and replayed on the target; a retried
// operation id answered from the de-duplication table (moved with the
// object) is not logged again; timer ticks are logged as such.
func TestExecLog(t *testing.T) {
	m, paths, regs := startExecMesh(t, 2)
	ctx := context.Background()
	direct := newClient(t, client.Config{Etcd: m.etcd})
	audit, err := verify.StartAudit(ctx, m.etcd, keyspace.Default(), 0)
	if err != nil {
		t.Fatal(err)
	}
	const obj = "actor/xslow/x"

	var mu sync.Mutex
	replies := map[string]*client.Reply{} // by operation id: each executed once
	call := func(c *client.Client, op wire.OperationID, args ...string) (*client.Reply, error) {
		b := make([][]byte, len(args))
		for i, a := range args {
			b[i] = []byte(a)
		}
		r, err := c.CallOp(ctx, op, obj, "add", b)
		if err == nil && !r.Replayed {
			mu.Lock()
			replies[op.String()] = r
			mu.Unlock()
		}
		return r, err
	}
	must := func(r *client.Reply, err error) *client.Reply {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// A few calls, and a retry of one of them on the same owner.
	retried := wire.NewOperationID()
	first := must(call(direct, retried, "1"))
	for range 3 {
		must(call(direct, wire.NewOperationID(), "1"))
	}
	if r := must(call(direct, retried, "1")); !r.Replayed || value(t, r) != value(t, first) {
		t.Fatalf("retry: replayed %v, value %d, first answered %d", r.Replayed, value(t, r), value(t, first))
	}
	src := m.owner(t, obj)
	var dst, gwNode *node.Node
	for _, n := range m.nodes {
		if n != src {
			dst, gwNode = n, n
		}
	}
	// Through a gateway: the other node forwards to the owner.
	gw := newClient(t, client.Config{Nodes: []string{gwNode.Address()}})
	must(call(gw, wire.NewOperationID(), "1"))
	before := must(call(direct, wire.NewOperationID(), "1")).Fence

	// A timer on the source: its ticks are logged as timer lines.
	tc := newClient(t, client.Config{Etcd: m.etcd})
	if _, err := tc.Call(ctx, "actor/ticker/t", "start", "10"); err != nil {
		t.Fatal(err)
	}

	// A slow call runs, two more queue behind it, then the object moves:
	// the seal waits for the slow one and captures the queued ones, which
	// run on the target (their replies relayed through the source).
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	wg.Go(func() {
		if _, err := call(direct, wire.NewOperationID(), "1", "400"); err != nil {
			errs <- err
		}
	})
	time.Sleep(100 * time.Millisecond)
	for range 2 {
		wg.Go(func() {
			if _, err := call(direct, wire.NewOperationID(), "1"); err != nil {
				errs <- err
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	st, err := src.Relocate(ctx, obj, node.RelocateOptions{Target: dst.Self().ID})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetOutcome() != "completed" {
		t.Fatalf("relocation: %+v", st)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// After the move: the retry is answered from the moved table; new calls
	// run on the target.
	if r := must(call(direct, retried, "1")); !r.Replayed || value(t, r) != value(t, first) || r.Fence.Owner != dst.Self() {
		t.Fatalf("retry after the move: replayed %v, value %d (first %d), fence %+v", r.Replayed, value(t, r), value(t, first), r.Fence)
	}
	var after []string
	for range 3 {
		op := wire.NewOperationID()
		must(call(direct, op, "1"))
		after = append(after, op.String())
	}
	final := must(call(gw, wire.NewOperationID(), "0"))
	if v := value(t, final); v != int64(len(replies)-1) {
		t.Fatalf("final value %d, %d executions of add 1", v, len(replies)-1)
	}
	tr, err := tc.Call(ctx, "actor/ticker/t", "stop")
	if err != nil {
		t.Fatal(err)
	}
	var ticks struct{ Count int64 }
	if err := json.Unmarshal(tr.Payload, &ticks); err != nil {
		t.Fatal(err)
	}
	res := audit.Stop(ctx)

	logs, stats, err := execlog.ReadFiles(paths...)
	if err != nil {
		t.Fatal(err)
	}
	var replayed, xlogErrors float64
	for _, reg := range regs {
		replayed += counterValue(t, reg, "meshloc_relocation_requests_replayed_total")
		xlogErrors += counterValue(t, reg, "meshloc_exec_log_errors_total")
	}
	t.Logf("stats %+v; %d captured or DATA requests replayed on the target", stats, int(replayed))
	if xlogErrors != 0 {
		t.Errorf("%v execution log write errors", xlogErrors)
	}
	seen := map[string][]execSeen{}
	var tickLines int64
	for owner, es := range logs {
		for _, e := range es {
			if e.Object == "actor/ticker/t" {
				tickLines += e.TimerTicks
			}
			for _, op := range e.OperationIDs {
				seen[op] = append(seen[op], execSeen{owner, verify.FenceKey{Object: e.Object, ObjectGeneration: e.ObjectGeneration, AuthorityGeneration: e.AuthorityGeneration}})
			}
		}
	}
	if stats.TornLines != 0 || stats.Files != 2 {
		t.Errorf("stats %+v", stats)
	}
	// xslow: one line per executed op, under its reply's fence; ticker: start and stop.
	if want := int64(len(replies) + 2); stats.Requests != want {
		t.Errorf("%d request lines, %d executions", stats.Requests, want)
	}
	for op, r := range replies {
		s := seen[op]
		want := execSeen{r.Fence.Owner.String(), verify.FenceKey{Object: obj, ObjectGeneration: r.Fence.ObjectGeneration, AuthorityGeneration: r.Fence.AuthorityGeneration}}
		if len(s) != 1 || s[0] != want {
			t.Errorf("op %s: logged %+v, its reply's fence is %+v", op, s, want)
		}
	}
	if s := seen[retried.String()]; len(s) != 1 || s[0].owner != src.Self().String() {
		t.Errorf("retried op logged %+v", s)
	}
	for _, op := range after {
		s := seen[op]
		if len(s) != 1 || s[0].owner != dst.Self().String() || s[0].fence.AuthorityGeneration != before.AuthorityGeneration+1 ||
			s[0].fence.ObjectGeneration != before.ObjectGeneration {
			t.Errorf("op %s after the move: logged %+v, before the move o%d/a%d on %s", op, s, before.ObjectGeneration, before.AuthorityGeneration, src.Self())
		}
	}
	if tickLines == 0 || tickLines != ticks.Count {
		t.Errorf("%d timer lines, the ticker counted %d ticks", tickLines, ticks.Count)
	}
	if c := verify.CheckExecLogs(logs, res); len(c.Violations) > 0 || c.DoubleExecutions != 0 || c.TwoOwnerWindows != 0 {
		t.Errorf("check: %+v", c)
	}
	if !res.Complete() || len(res.Violations) > 0 {
		t.Errorf("audit: %s %+v", res.Err, res.Violations)
	}
	// The line format itself.
	b, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	line := strings.SplitN(string(b), "\n", 2)[0]
	for _, k := range []string{`{"owner":"`, `,"ownerGeneration":`, `,"object":"`, `,"objectGeneration":`, `,"authorityGeneration":`, `,"t":`} {
		if !strings.Contains(line, k) {
			t.Errorf("line %s lacks %s", line, k)
		}
	}
}

// A node started with --exec-log appends to the file a previous life left,
// terminating a torn last line first.
func TestExecLogAppendsAfterTornLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "n1.log")
	torn := `{"owner":"n1","ownerGeneration":1,"object":"actor/counter/c","objectGeneration":1,"authorityGeneration":1,"op":"01`
	if err := os.WriteFile(path, []byte(torn), 0o644); err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, 1, func(_ int, c *node.Config) { c.ExecLog = path })
	c := newClient(t, client.Config{Etcd: m.etcd})
	r, err := c.Call(context.Background(), "actor/counter/c", "add", "1")
	if err != nil {
		t.Fatal(err)
	}
	logs, st, err := execlog.ReadFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	es := logs[m.nodes[0].Self().String()]
	if st.TornLines != 1 || st.Requests != 1 || len(es) != 1 || es[0].AuthorityGeneration != r.Fence.AuthorityGeneration {
		t.Fatalf("stats %+v, logs %+v", st, logs)
	}
}
