package integration

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// controllerTTL is the locationd processes' --election-ttl here.
const controllerTTL = 3 * time.Second

// startLocationdArgs starts a locationd with args (plus a free --http) and
// waits until /readyz answers; a start that lost its port is retried. ports
// gives the args that need fresh free ports on every attempt.
func startLocationdArgs(t *testing.T, name string, ports func() []string, args ...string) (*process, string, *client.Admin) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		httpAddr := freeAddr(t)
		all := append(append([]string{"--http", httpAddr}, ports()...), args...)
		p := startProcess(t, name, binary(t, "locationd"), all...)
		cl, err := client.NewAdmin("http://"+httpAddr, httpClient(t))
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err = cl.Ready(ctx)
			cancel()
			if err == nil {
				return p, httpAddr, cl
			}
			if !p.alive() || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if attempt < 5 && !p.alive() && strings.Contains(p.out.String(), "address already in use") {
			continue
		}
		t.Fatalf("%s ready: %v (exited: %v)\n%s", name, err, !p.alive(), p.out.String())
	}
}

func recoveryController(ctx context.Context, cl *client.Admin) (api.Controller, error) {
	r, _, err := cl.Controllers(ctx)
	if err != nil {
		return api.Controller{}, err
	}
	if len(r.Controllers) != 1 || r.Controllers[0].Name != "recovery" {
		return api.Controller{}, fmt.Errorf("controllers %+v", r.Controllers)
	}
	return r.Controllers[0], nil
}

// TestControllerHandover: two locationd processes against one etcd (one
// with the embedded etcd, one with --etcd-endpoints pointing at it); the
// recovery controller's leader is found with GET /v1/controllers and killed
// with SIGKILL; the other becomes leader once etcd expires the dead one's
// lease, within about the election TTL (the time is measured and printed).
//
// The embedded-etcd locationd campaigns first and leads; killing it would
// kill the etcd too, so the test first takes the role from it by revoking
// its election lease (what etcd does when a leader's lease expires): it must
// stop leading at once and campaign again, behind the other.
func TestControllerHandover(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	var etcdURL string
	a, aHTTP, aAPI := startLocationdArgs(t, "locationd-a", func() []string {
		etcdURL = "http://" + freeAddr(t)
		return []string{"--listen-client", etcdURL, "--listen-peer", "http://" + freeAddr(t)}
	}, "--data-dir", filepath.Join(t.TempDir(), "a"), "--election-ttl", controllerTTL.String())
	b, bHTTP, bAPI := startLocationdArgs(t, "locationd-b", func() []string { return nil },
		"--etcd-endpoints", etcdURL, "--election-ttl", controllerTTL.String())
	procs := []*process{a, b}

	leaderIs := func(cl *client.Admin, http string, self bool) func(context.Context) error {
		return func(ctx context.Context) error {
			c, err := recoveryController(ctx, cl)
			if err != nil {
				return err
			}
			if c.Leader == nil || c.Leader.HTTP != http || c.Leader.SinceUnixMs == 0 || c.Self.Leader != self {
				return fmt.Errorf("leader %+v, self %+v", c.Leader, c.Self)
			}
			return nil
		}
	}
	waitFor(t, time.Minute, "a leads, as both say", func(ctx context.Context) error {
		if err := leaderIs(aAPI, aHTTP, true)(ctx); err != nil {
			return err
		}
		return leaderIs(bAPI, aHTTP, false)(ctx)
	}, procs...)

	// Take the role from a: revoke its election lease.
	etcd := etcdtest.Client(t, etcdURL)
	ctx := context.Background()
	first, err := etcd.Get(ctx, keyspace.Default().Controller("recovery")+"/", clientv3.WithFirstCreate()...)
	if err != nil || len(first.Kvs) == 0 {
		t.Fatalf("election key: %v %v", first, err)
	}
	if _, err := etcd.Revoke(ctx, clientv3.LeaseID(first.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "b leads after a's lease was revoked, and a campaigns again", func(ctx context.Context) error {
		if err := leaderIs(bAPI, bHTTP, true)(ctx); err != nil {
			return err
		}
		if err := leaderIs(aAPI, bHTTP, false)(ctx); err != nil {
			return err
		}
		r, err := etcd.Get(ctx, keyspace.Default().Controller("recovery")+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || r.Count != 2 {
			return fmt.Errorf("%v candidates (%v)", r, err)
		}
		return nil
	}, procs...)

	// Kill -9 the active controller, found through the API.
	c, err := recoveryController(ctx, aAPI)
	if err != nil {
		t.Fatal(err)
	}
	victim, survivor, survivorHTTP, survivorAPI := b, a, aHTTP, aAPI
	if c.Leader.HTTP == aHTTP {
		t.Fatalf("a leads again: %+v", c.Leader)
	}
	t0 := time.Now()
	victim.kill()
	var handover time.Duration
	waitFor(t, time.Minute, "the survivor leads", func(ctx context.Context) error {
		if err := leaderIs(survivorAPI, survivorHTTP, true)(ctx); err != nil {
			return err
		}
		handover = time.Since(t0)
		return nil
	}, survivor)
	t.Logf("handover after kill -9 of the leading locationd: %s (election TTL %s; etcd expires a lease within its TTL of the last keep-alive, and checks for expired leases every 500ms)",
		handover.Round(time.Millisecond), controllerTTL)
	fmt.Printf("controller handover after kill -9: %s (--election-ttl %s)\n", handover.Round(time.Millisecond), controllerTTL)
}

// TestRebalanceProcesses: 3 meshnode processes, 30 counters gathered on n1;
// `meshctl rebalance --dry-run` prints a plan with reason load and moves
// nothing; `meshctl rebalance` runs it; the counters spread (counts
// printed) with their values intact; a second dry run finds nothing to do.
func TestRebalanceProcesses(t *testing.T) {
	m := startMesh(t, 3)
	ctx := context.Background()
	cl := newClient(t, client.Config{EtcdEndpoints: []string{m.etcdURL}})
	const objects = 30
	name := func(i int) string { return fmt.Sprintf("actor/counter/rb%02d", i) }
	for i := range objects {
		if _, err := cl.Call(ctx, name(i), "add", fmt.Sprint(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	counts := func() map[string]int {
		out := map[string]int{}
		for _, o := range m.objects(t, api.ObjectsQuery{Kind: "actor"}) {
			if strings.HasPrefix(o.Object, "actor/counter/rb") {
				out[o.Record.Owner.ID]++
			}
		}
		return out
	}
	t.Logf("placement put the counters at %v", counts())
	for i := range objects {
		if m.object(t, name(i)).Record.Owner.ID == "n1" {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		rel, raw, err := m.api.Relocate(rctx, api.RelocateRequest{Object: name(i), Target: "n1"})
		cancel()
		if err != nil || rel.Outcome != api.OutcomeCompleted {
			t.Fatalf("gather %s on n1: %s %v", name(i), raw, err)
		}
	}
	if c := counts(); c["n1"] != objects {
		t.Fatalf("gathered: %v", c)
	}
	meshctl := func(args ...string) (string, string, int) {
		cmd := exec.Command(binary(t, "meshctl"), append([]string{"--locationd", m.api.Base()}, args...)...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}

	out, errs, code := meshctl("rebalance", "--dry-run", "--budget", "100")
	t.Logf("meshctl rebalance --dry-run --budget 100:\n%s", out)
	if code != 0 || !strings.Contains(out, "n1    ->  n") || !strings.Contains(out, " load") || !strings.Contains(out, "plan: ") {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errs)
	}
	planned := strings.Count(out, "->")
	if c := counts(); c["n1"] != objects {
		t.Fatalf("a dry run moved objects: %v", c)
	}

	out, errs, code = meshctl("rebalance", "--budget", "100")
	t.Logf("meshctl rebalance --budget 100:\n%s", out)
	want := fmt.Sprintf("rebalance: %d moves: %d completed, 0 skipped, 0 failed", planned, planned)
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("run: exit %d, want %q\n%s\n%s", code, want, out, errs)
	}
	after := counts()
	var ids []string
	for id := range after {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var line []string
	for _, id := range ids {
		line = append(line, fmt.Sprintf("%s=%d", id, after[id]))
		if after[id] > 11 || after[id] < 9 { // fair share 10, tolerance 10%
			t.Errorf("%s holds %d counters after the rebalance", id, after[id])
		}
	}
	t.Logf("counters per node after the rebalance: %s (%d moves)", strings.Join(line, " "), planned)
	fmt.Printf("rebalance of 30 counters from n1: %d moves, counts %s\n", planned, strings.Join(line, " "))

	for i := range objects {
		r, err := cl.Call(ctx, name(i), "get")
		if err != nil {
			t.Fatalf("%s: %v", name(i), err)
		}
		if v, err := counterValue(r); err != nil || v != int64(i+1) {
			t.Fatalf("%s after the rebalance: %d %v, want %d", name(i), v, err, i+1)
		}
	}
	out, errs, code = meshctl("rebalance", "--dry-run")
	if code != 0 || !strings.Contains(out, "balanced: nothing to move") {
		t.Fatalf("dry run after the rebalance: exit %d\n%s\n%s", code, out, errs)
	}
}
