package integration

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/internal/verify"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// verifyCluster is a mesh of processes as the verification suite sees it:
// half the clients route from etcd straight to owners, half call through
// the nodes as gateways; relocations go to the owner's AdminService, found
// from the object's authority record.
type verifyCluster struct {
	t     *testing.T
	m     *mesh
	etcd  *clientv3.Client
	store *authority.Store

	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn
	clients []*client.Client
	timeout time.Duration
}

func newVerifyCluster(t *testing.T, m *mesh, callTimeout time.Duration) *verifyCluster {
	t.Helper()
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{m.etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	c := &verifyCluster{t: t, m: m, etcd: etcd, store: authority.New(etcd, keyspace.Default()), conns: map[string]*grpc.ClientConn{}, timeout: callTimeout}
	t.Cleanup(c.close)
	return c
}

func (c *verifyCluster) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cl := range c.clients {
		cl.Close()
	}
	for _, cc := range c.conns {
		cc.Close()
	}
	c.etcd.Close()
}

// NewCaller alternates: a client routing from etcd straight to owners, then
// one sending every call through the nodes as gateways.
func (c *verifyCluster) NewCaller(ctx context.Context) (verify.Caller, error) {
	c.mu.Lock()
	gateway := len(c.clients)%2 == 1
	c.mu.Unlock()
	cfg := client.Config{EtcdEndpoints: []string{c.m.etcdURL}, Timeout: c.timeout}
	if gateway {
		cfg = client.Config{Nodes: c.m.addrs(), Timeout: c.timeout}
	}
	cl, err := client.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.clients = append(c.clients, cl)
	c.mu.Unlock()
	return cl, nil
}

func (c *verifyCluster) Nodes() []string {
	var out []string
	for _, nd := range c.m.nodes {
		out = append(out, nd.name)
	}
	return out
}

func (c *verifyCluster) Etcd() *clientv3.Client { return c.etcd }
func (c *verifyCluster) Keys() keyspace.Keys    { return keyspace.Default() }

func (c *verifyCluster) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cc
	return cc, nil
}

// Relocate asks the object's owner, as etcd names it, through its AdminService.
func (c *verifyCluster) Relocate(ctx context.Context, object, target string) (*pb.RelocationStatus, error) {
	obj, err := keyspace.ParseObject(object)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	snap, err := c.store.Read(ctx, obj)
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, "authority: "+err.Error())
	}
	cc, err := c.conn(snap.Record.Node.Address)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return rpcpb.NewAdminServiceClient(cc).Relocate(ctx, &pb.RelocateCommand{Object: object, Target: target, TimeoutMs: 5000})
}

// killOwner is the fault: SIGKILL the node that owns the most of objects,
// wait until etcd dropped its lease (its owner key is gone), restart it with
// the same --name and addresses, and wait until it serves again.
func (c *verifyCluster) killOwner(objects []string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		mine := map[string]bool{}
		for _, o := range objects {
			mine[o] = true
		}
		snaps, _, err := c.store.List(ctx, authority.ListOptions{Kind: keyspace.KindActor})
		if err != nil {
			return err
		}
		per := map[string]int{}
		for _, s := range snaps {
			if mine[s.Object.String()] {
				per[s.Record.Owner.ID]++
			}
		}
		victim := c.m.nodes[0]
		for _, nd := range c.m.nodes {
			if per[nd.name] > per[victim.name] {
				victim = nd
			}
		}
		c.t.Logf("verify: SIGKILL %s@%d, owner of %d workload objects (%v)", victim.name, victim.gen, per[victim.name], per)
		victim.p.kill()
		killed := time.Now()
		ownerKey := keyspace.Default().Owner(victim.name)
		for {
			r, err := c.etcd.Get(ctx, ownerKey)
			if err == nil && len(r.Kvs) == 0 {
				break
			}
			if time.Since(killed) > meshTTL+10*time.Second {
				return fmt.Errorf("the lease of %s did not expire %v after SIGKILL", victim.name, time.Since(killed))
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.t.Logf("verify: lease of %s expired %v after SIGKILL; restarting it", victim.name, time.Since(killed).Round(time.Millisecond))
		victim.p = startProcess(c.t, victim.name, binary(c.t, "meshnode"),
			"--name", victim.name,
			"--etcd-endpoints", c.m.etcdURL,
			"--listen", victim.addr,
			"--http", victim.http,
			"--lease-ttl", meshTTL.String(),
		)
		dumpIfHung(c.t, victim.name, victim.p, 18*time.Second)
		for {
			octx, cancel := context.WithTimeout(ctx, 2*time.Second)
			r, _, err := c.m.api.Owners(octx)
			cancel()
			if err == nil {
				for _, o := range r.Owners {
					if o.ID == victim.name && o.State == "serving" && o.Generation > victim.gen {
						victim.gen = o.Generation
						c.t.Logf("verify: %s serving again as %s@%d, %v after SIGKILL", victim.name, o.ID, o.Generation, time.Since(killed).Round(time.Millisecond))
						return nil
					}
				}
			}
			if !victim.p.alive() {
				return fmt.Errorf("restarted %s exited: %v\n%s", victim.name, victim.p.err, victim.p.out)
			}
			if time.Since(killed) > meshTTL+30*time.Second {
				return fmt.Errorf("restarted %s not serving %v after SIGKILL", victim.name, time.Since(killed))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// dumpIfHung registers a cleanup, to run before p's own (registered
// earlier), that sends SIGTERM and waits up to d; a process still running
// then gets SIGQUIT: the Go runtime prints every goroutine to its output,
// which is logged as the test fails.
func dumpIfHung(t *testing.T, name string, p *process, d time.Duration) {
	t.Cleanup(func() {
		if !p.alive() {
			return
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		if p.wait(d) {
			return
		}
		_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		p.wait(5 * time.Second)
		t.Errorf("%s still running %v after SIGTERM: sent SIGQUIT (its goroutines are in its output below)", name, d)
	})
}

// TestVerifyShort is a short checked run of the verification suite over
// real processes (locationd with its embedded etcd, three meshnodes): the
// bank, register, list and counter workloads with a relocation storm, and
// one fault, SIGKILL of the node owning the most objects mid-run (restarted
// once its lease expired). It fails when the report does: anything lost that
// no StateLost reply declared, anything duplicated, a register history
// porcupine cannot linearise, an authority write the audit refuses, two
// owners, a stale reply accepted, or an object not readable after heal.
func TestVerifyShort(t *testing.T) {
	m := startMesh(t, 3)
	// A node that does not stop after SIGTERM is dumped (SIGQUIT), so the
	// failure says where it hangs.
	for _, nd := range m.nodes {
		dumpIfHung(t, nd.name, nd.p, 18*time.Second)
	}
	const callTimeout = 6 * time.Second
	c := newVerifyCluster(t, m, callTimeout)
	prefix := fmt.Sprintf("v%d", time.Now().UnixNano()%1_000_000)
	think := 3 * time.Millisecond
	// The history, the JSON report and porcupine's pages: kept when the test fails.
	artifacts, err := os.MkdirTemp("", "meshloc-verify-"+prefix+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(artifacts)
		}
	})
	workloads := []verify.Workload{
		&verify.Bank{Prefix: prefix, N: 2, Think: think},
		&verify.Register{Prefix: prefix, N: 12, Think: think, ArtifactDir: artifacts},
		&verify.List{Prefix: prefix, N: 6, Think: think},
		&verify.Counter{Prefix: prefix, N: 6, Think: think},
	}
	var objects []string
	for _, w := range workloads {
		objects = append(objects, w.Objects()...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := verify.Run(ctx, verify.Config{
		Cluster:            c,
		Workloads:          workloads,
		Streams:            3,
		Duration:           20 * time.Second,
		OpTimeout:          callTimeout,
		Relocations:        true,
		RelocationWorkers:  3,
		RelocationInterval: 20 * time.Millisecond,
		// A relocation's deadline is 5 s (RelocateCommand.TimeoutMs) and
		// its hard stop 5 s later: unanswered after 15 s, it did not end.
		RelocationTimeout:  15 * time.Second,
		RelocationsMustEnd: true,
		Faults:             []verify.Fault{{Kind: "kill-owner", At: 7 * time.Second, Inject: c.killOwner(objects)}},
		FinalTimeout:       30 * time.Second,
		ArtifactDir:        artifacts,
		Logf:               t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("verification report\n%s", rep.Text())
	t.Logf("history and JSON report in %s (removed if the test passes)", artifacts)
	if rep.Failed() {
		t.Errorf("the verification run failed: %d violations, %d errors, %d/%d objects readable after heal",
			rep.Totals.Violations, len(rep.Errors), rep.Liveness.Readable, rep.Liveness.Objects)
	}
	// The run must have measured what it claims.
	if n := rep.Relocations.Results["unimplemented"]; n > 0 {
		t.Errorf("%d relocation requests answered Unimplemented: meshnode serves no AdminService (internal/node registers no adminServer)", n)
	}
	if rep.Relocations.Results["completed"] == 0 {
		t.Errorf("the relocation storm completed no relocation: %v", rep.Relocations.Results)
	}
	if rep.Faults["kill-owner"] != 1 {
		t.Errorf("faults injected: %v", rep.Faults)
	}
	if rep.Totals.DeclaredLost == 0 {
		t.Logf("note: the killed owner's objects lost no acknowledged write (none declared lost)")
	}
}
