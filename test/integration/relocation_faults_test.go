package integration

// Relocation faults across processes: locationd (embedded etcd) and
// meshnode binaries built with the build tag `failpoints`, each armed
// through MESHLOC_FAILPOINTS in its environment (internal/failpoint). A
// process that reaches a point armed "crash" prints "failpoint: <name>
// crash" and kills itself with SIGKILL: a real crash, lease and all.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/pkg/client"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

var (
	fpBuildOnce sync.Once
	fpBuildErr  error
)

// failpointBinary returns the path of ./cmd/<name> built with -tags
// failpoints (once per test binary, next to the plain builds of binary()).
func failpointBinary(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(binDir, "failpoints")
	fpBuildOnce.Do(func() {
		root, err := findModuleRoot()
		if err != nil {
			fpBuildErr = err
			return
		}
		args := []string{"build", "-tags", "failpoints", "-o", dir + string(filepath.Separator), "./cmd/meshnode"}
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			fpBuildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if fpBuildErr != nil {
		t.Fatal(fpBuildErr)
	}
	bin := filepath.Join(dir, name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("failpoints binary %s: %v", name, err)
	}
	return bin
}

// startProcessEnv is startProcess with extra environment variables.
func startProcessEnv(t *testing.T, name, bin string, env []string, args ...string) *process {
	t.Helper()
	p := &process{name: name, cmd: exec.Command(bin, args...), out: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if err := p.stop(stopTimeout); err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
		if t.Failed() {
			t.Logf("output of %s (%s):\n%s", p.name, p.cmd.ProcessState, p.out)
		}
	})
	return p
}

// startFaultMesh starts locationd; nodes are added one by one with addNode,
// so that a test decides which node owns what. Every node is stopped when
// the test ends (before locationd).
func startFaultMesh(t *testing.T) *mesh {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	lp, etcdURL, cl := startLocationd(t)
	m := &mesh{locationd: lp, etcdURL: etcdURL, api: cl, hc: httpClient(t)}
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
	return m
}

// addNode starts a failpoints meshnode with MESHLOC_FAILPOINTS=failpoints
// (none when empty) and extra flags, and waits until it serves.
func (m *mesh) addNode(t *testing.T, name, failpoints string, extra ...string) *meshNode {
	t.Helper()
	nd := &meshNode{name: name, addr: freeAddr(t), http: freeAddr(t)}
	var env []string
	if failpoints != "" {
		env = append(env, "MESHLOC_FAILPOINTS="+failpoints)
	}
	args := append([]string{"--name", name, "--etcd-endpoints", m.etcdURL, "--listen", nd.addr, "--http", nd.http,
		"--lease-ttl", meshTTL.String()}, extra...)
	nd.p = startProcessEnv(t, name, failpointBinary(t, "meshnode"), env, args...)
	m.nodes = append(m.nodes, nd)
	waitFor(t, time.Minute, name+" serving", func(ctx context.Context) error {
		r, _, err := m.api.Owners(ctx)
		if err != nil {
			return err
		}
		for _, o := range r.Owners {
			if o.ID == name && o.State == "serving" && o.Address == nd.addr {
				nd.gen = o.Generation
				return nil
			}
		}
		return fmt.Errorf("%s not serving yet", name)
	}, m.locationd, nd.p)
	return nd
}

// waitCrash waits until nd printed "failpoint: <point> crash" and exited.
func waitCrash(t *testing.T, nd *meshNode, point string, within time.Duration) {
	t.Helper()
	line := "failpoint: " + point + " crash"
	deadline := time.Now().Add(within)
	for !strings.Contains(nd.p.out.String(), line) || nd.p.alive() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %q and exit within %s (alive=%v)", nd.name, line, within, nd.p.alive())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hostedObjects reads meshloc_hosted_objects from nd's /metrics.
func hostedObjects(t *testing.T, m *mesh, nd *meshNode) float64 {
	t.Helper()
	resp, err := m.hc.Get("http://" + nd.http + "/metrics")
	if err != nil {
		t.Fatalf("/metrics of %s: %v", nd.name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "meshloc_hosted_objects ") || strings.HasPrefix(line, "meshloc_hosted_objects{") {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("%s: %q", nd.name, line)
			}
			return v
		}
	}
	t.Fatalf("/metrics of %s has no meshloc_hosted_objects", nd.name)
	return 0
}

// admin is an AdminService client of nd.
func admin(t *testing.T, nd *meshNode) rpcpb.AdminServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(nd.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rpcpb.NewAdminServiceClient(conn)
}

// relocate asks a source node (AdminService.Relocate) to move object to
// target, in the foreground: at once, however loaded the machine.
func relocate(ctx context.Context, src rpcpb.AdminServiceClient, object, target string, timeout time.Duration) (*pb.RelocationStatus, error) {
	return src.Relocate(ctx, &pb.RelocateCommand{Object: object, Target: target, TimeoutMs: timeout.Milliseconds(), Foreground: true})
}

// notServed fails the test when err says the node has no AdminService.
func notServed(t *testing.T, err error) {
	t.Helper()
	if status.Code(err) == codes.Unimplemented {
		t.Fatalf("AdminService.Relocate: %v: pkg/node registers no adminServer on its gRPC server", err)
	}
}

// listAppender appends "x<k>" to a list, one call at a time, until halted.
type listAppender struct {
	mu        sync.Mutex
	acked     []string
	attempted map[string]bool
	errs      []error
	stop      chan struct{}
	done      chan struct{}
}

func startListAppender(c *client.Client, object string) *listAppender {
	a := &listAppender{attempted: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(a.done)
		for k := 0; ; k++ {
			select {
			case <-a.stop:
				return
			default:
			}
			v := fmt.Sprintf("x%d", k)
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

// check halts a and asserts that object holds first, then every
// acknowledged append exactly once in order, and nothing never sent.
func (a *listAppender) check(t *testing.T, c *client.Client, object string, first []string) {
	t.Helper()
	close(a.stop)
	<-a.done
	for _, err := range a.errs {
		t.Errorf("caller: %v", err)
	}
	if len(a.acked) == 0 {
		t.Errorf("caller: nothing acknowledged")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := c.Call(ctx, object, "read")
	if err != nil {
		t.Fatalf("read %s: %v", object, err)
	}
	var got struct {
		Items []string `json:"items"`
	}
	if err := json.Unmarshal(r.Payload, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Items) < len(first) || !slices.Equal(got.Items[:len(first)], first) {
		t.Fatalf("%s: first items %q not intact: %q", object, first, got.Items)
	}
	rest := got.Items[len(first):]
	seen := map[string]int{}
	for _, v := range rest {
		if seen[v]++; seen[v] == 2 {
			t.Errorf("%s: %q executed twice", object, v)
		}
		if !a.attempted[v] {
			t.Errorf("%s: %q never sent", object, v)
		}
	}
	k := 0
	for _, v := range rest {
		if k < len(a.acked) && v == a.acked[k] {
			k++
		}
	}
	for _, v := range a.acked {
		if seen[v] == 0 {
			t.Errorf("%s: acknowledged %q lost", object, v)
		}
	}
	if k != len(a.acked) {
		t.Errorf("%s: acknowledged appends out of order", object)
	}
	t.Logf("%s: %d appends acknowledged, %d items", object, len(a.acked), len(got.Items))
}

// TestTargetKilledBeforeCommit: the target process dies (SIGKILL) after
// READY and CUTOVER, before its commit transaction. The source, past the
// point of no return, preserves at its deadline and reopens: the relocation
// ends aborted, the source still owns and serves the list, and a caller that
// appended all along lost nothing and had nothing executed twice.
func TestTargetKilledBeforeCommit(t *testing.T) {
	m := startFaultMesh(t)
	n1 := m.addNode(t, "n1", "")
	c := newClient(t, client.Config{EtcdEndpoints: []string{m.etcdURL}})
	ctx := context.Background()
	const obj = "actor/list/killed-target"
	first := []string{"a", "b", "c"}
	for _, v := range first {
		if _, err := c.Call(ctx, obj, "append", v); err != nil {
			t.Fatal(err)
		}
	}
	if o := m.object(t, obj); o.Record.Owner.ID != "n1" {
		t.Fatalf("%s owned by %s, want n1", obj, o.Record.Owner)
	}
	n2 := m.addNode(t, "n2", "target.before-commit=crash")

	a := startListAppender(c, obj)
	time.Sleep(100 * time.Millisecond)
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	st, err := relocate(rctx, admin(t, n1), obj, "n2", 3*time.Second)
	notServed(t, err)
	if err != nil {
		t.Fatalf("relocate: %v", err)
	}
	waitCrash(t, n2, "target.before-commit", 5*time.Second)
	time.Sleep(200 * time.Millisecond)
	if st.GetOutcome() != "aborted" {
		t.Errorf("relocation ended %s %v (%s), want aborted", st.GetOutcome(), st.GetCode(), st.GetMessage())
	}
	o := m.object(t, obj)
	if o.Record.Owner.ID != "n1" || o.Record.Owner.Generation != n1.gen || !o.OwnerAlive || o.Record.State != "active" || o.Record.AuthorityGeneration != 1 {
		t.Errorf("record after the abort: %+v alive=%v, want active, owned by n1@%d, owner generation 1", o.Record, o.OwnerAlive, n1.gen)
	}
	a.check(t, c, obj, first)
	if r, err := c.Call(ctx, obj, "read"); err != nil || r.Node != "n1" {
		t.Errorf("read: %v %v, want served by n1", r, err)
	}
	t.Logf("relocation %s %v: %s", st.GetOutcome(), st.GetCode(), st.GetMessage())
}

// TestSourceKilledMidStream: the source process dies (SIGKILL) while it
// streams a 4 MiB blob in 64 KiB chunks, before the third. The target never
// restores nor commits: the record is never the target's. Once the source's
// lease expires the object is orphaned, and the next call re-creates it and
// says STATE_LOST.
func TestSourceKilledMidStream(t *testing.T) {
	m := startFaultMesh(t)
	n1 := m.addNode(t, "n1", "source.chunk=crash@3", "--chunk-bytes", "65536")
	c := newClient(t, client.Config{EtcdEndpoints: []string{m.etcdURL}})
	ctx := context.Background()
	const obj = "actor/blob/killed-source"
	if _, err := c.Call(ctx, obj, "fill", "4194304"); err != nil {
		t.Fatal(err)
	}
	if o := m.object(t, obj); o.Record.Owner.ID != "n1" {
		t.Fatalf("%s owned by %s, want n1", obj, o.Record.Owner)
	}
	n2 := m.addNode(t, "n2", "")

	errc := make(chan error, 1)
	src := admin(t, n1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := relocate(rctx, src, obj, "n2", 10*time.Second)
		errc <- err
	}()
	select {
	case err := <-errc:
		notServed(t, err)
		errc <- err
	case <-time.After(500 * time.Millisecond):
	}
	waitCrash(t, n1, "source.chunk", 10*time.Second)
	if err := <-errc; err == nil {
		t.Errorf("Relocate answered although its node was killed")
	}

	// The target notices the broken stream and ends its attempt at once
	// (before READY, no commit) — not at the relocation's deadline (10 s).
	killed := time.Now()
	var attempt *pb.RelocationStatus
	n2admin := admin(t, n2)
	for time.Since(killed) < 3*time.Second && (attempt == nil || attempt.GetEndedUnixMs() == 0) {
		time.Sleep(50 * time.Millisecond)
		lr, err := n2admin.ListRelocations(ctx, &pb.ListRelocationsRequest{})
		if err != nil {
			t.Fatalf("ListRelocations on n2: %v", err)
		}
		for _, st := range lr.GetRelocations() {
			if st.GetObject() == obj && st.GetRole() == "target" {
				attempt = st
			}
		}
	}
	switch {
	case attempt == nil:
	case attempt.GetEndedUnixMs() == 0:
		t.Errorf("n2's attempt still open %v after the source was killed: %v — the broken stream was not noticed "+
			"(pkg/node targetRun.run's receive goroutine drops StreamBroken when the stream context is already canceled)", time.Since(killed).Round(time.Millisecond), attempt)
	case attempt.GetOutcome() == "completed":
		t.Errorf("n2 committed a stage it never completed: %v", attempt)
	default:
		t.Logf("n2's attempt: %s %v (%s)", attempt.GetOutcome(), attempt.GetCode(), attempt.GetMessage())
	}

	// The record stays the dead source's (relocating to n2) until its lease
	// expires; it never names n2.
	waitFor(t, meshTTL+10*time.Second, obj+" orphaned", func(ctx context.Context) error {
		o := m.object(t, obj)
		if o.Record.Owner.ID != "n1" || o.Record.AuthorityGeneration != 1 {
			t.Fatalf("record of %s became %+v: the target committed a stage it never completed", obj, o.Record)
		}
		if o.OwnerAlive {
			return fmt.Errorf("owner %s still alive", o.Record.Owner)
		}
		return nil
	}, m.locationd, n2.p)
	t.Logf("orphaned %v after the kill", time.Since(killed).Round(time.Millisecond))

	// The target discarded its stage: it hosts nothing.
	if h := hostedObjects(t, m, n2); h != 0 {
		t.Errorf("n2 hosts %v objects after the source died mid-stream, want 0", h)
	}
	if attempt == nil {
		t.Logf("n2 never saw the PREPARE: the source died before it left (sends are asynchronous)")
	}

	// The next call re-creates it (on n2, the only live node) and says so.
	if _, err := c.Call(ctx, obj, "hash"); !isCode(err, pb.Code_CODE_STATE_LOST) {
		t.Fatalf("first call of the orphaned blob: %v, want state_lost", err)
	}
	o := m.object(t, obj)
	if o.Record.Owner.ID != "n2" || o.Record.ObjectGeneration != 2 || !o.OwnerAlive {
		t.Errorf("record after recovery: %+v alive=%v, want n2's, object generation 2", o.Record, o.OwnerAlive)
	}
	if r, err := c.Call(ctx, obj, "hash"); err != nil || !strings.Contains(string(r.Payload), `"size":0`) {
		t.Errorf("second call: %v %v, want an empty blob", r, err)
	}
}
