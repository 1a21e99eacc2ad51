package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/locationd/recovery"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var keys = keyspace.Default()

// running is a Controller run until stop (or the test's end).
type running struct {
	c    *recovery.Controller
	reg  *prometheus.Registry
	m    *recovery.Metrics
	once sync.Once
	stop func()
}

func start(t testing.TB, cli *clientv3.Client, id string, mutate func(*recovery.Config)) *running {
	t.Helper()
	cfg := recovery.DefaultConfig()
	cfg.ID, cfg.HTTP, cfg.TTL = id, id+".example:7070", 2*time.Second
	if mutate != nil {
		mutate(&cfg)
	}
	reg := prometheus.NewRegistry()
	m := recovery.NewMetrics(reg)
	c, err := recovery.New(cli, keys, cfg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel), m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	r := &running{c: c, reg: reg, m: m}
	r.stop = func() {
		r.once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("controller %s did not stop within 30s", id)
			}
		})
	}
	t.Cleanup(r.stop)
	return r
}

// waitFor polls cond every 20 ms until it holds; bounded generously.
func waitFor(t testing.TB, what string, d time.Duration, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := cond()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > d {
			t.Fatalf("%s: not after %s: %v", what, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leads waits until r leads, and ReadLeader names it with its since.
func leads(t testing.TB, cli *clientv3.Client, r *running, d time.Duration) time.Duration {
	t.Helper()
	return waitFor(t, r.c.Config().ID+" leads", d, func() error {
		if !r.c.Status().Leader {
			return fmt.Errorf("%s does not lead", r.c.Config().ID)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		l, found, err := recovery.ReadLeader(ctx, cli, keys)
		if err != nil || !found || l.Info.ID != r.c.Config().ID || l.Info.SinceUnixMs == 0 || l.Info.HTTP != r.c.Config().HTTP {
			return fmt.Errorf("leader %+v found=%v err=%v", l, found, err)
		}
		return nil
	})
}

func newClient(t *testing.T, ep string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Two candidates on one etcd: exactly one leads; a leader that stops hands
// over at once; a leader whose lease is revoked (what etcd does when it
// expires) stops acting and the other leads; a leader whose process dies
// (its client closes without a revoke) is replaced within the TTL.
func TestElectionHandover(t *testing.T) {
	srv := etcdtest.Single(t)
	ep := srv.Endpoint()
	watcher := etcdtest.Client(t, ep)
	const ttl = 2 * time.Second
	ca, cb := newClient(t, ep), newClient(t, ep)
	a := start(t, ca, "a", nil)
	leads(t, watcher, a, 30*time.Second)
	b := start(t, cb, "b", nil)
	time.Sleep(300 * time.Millisecond) // b campaigns; a keeps leading
	if !a.c.Status().Leader || b.c.Status().Leader {
		t.Fatalf("two candidates: a %+v, b %+v", a.c.Status(), b.c.Status())
	}
	if g := gauge(t, a.reg, "meshloc_locationd_controller_leader"); g != 1 {
		t.Fatalf("meshloc_locationd_controller_leader of the leader: %v", g)
	}
	if g := gauge(t, b.reg, "meshloc_locationd_controller_leader"); g != 0 {
		t.Fatalf("meshloc_locationd_controller_leader of the follower: %v", g)
	}

	// 1. The leader stops: its lease is revoked on the way out.
	t0 := time.Now()
	a.stop()
	d := leads(t, watcher, b, 30*time.Second)
	t.Logf("handover after a clean stop: %s (since the stop began: %s)", d, time.Since(t0))
	if a.c.Status().Leader || gauge(t, a.reg, "meshloc_locationd_controller_leader") != 0 {
		t.Fatal("a stopped controller still says it leads")
	}

	// 2. The leader's lease is revoked under it: it stops leading, the other
	// candidate (a new one on a's client) leads.
	a2 := start(t, ca, "a2", nil)
	time.Sleep(300 * time.Millisecond)
	l, _, err := recovery.ReadLeader(context.Background(), watcher, keys)
	if err != nil || l.Info.ID != "b" {
		t.Fatalf("leader %+v %v", l, err)
	}
	if _, err := watcher.Revoke(context.Background(), clientv3.LeaseID(l.LeaseID)); err != nil {
		t.Fatal(err)
	}
	d = waitFor(t, "b stops leading", 30*time.Second, func() error {
		if b.c.Status().Leader {
			return fmt.Errorf("b leads")
		}
		return nil
	})
	t.Logf("a leader whose lease was revoked stopped leading after %s", d)
	leads(t, watcher, a2, 30*time.Second)
	leads(t, watcher, a2, time.Second) // and stays
	if b.c.Status().Leader {
		t.Fatal("both lead")
	}

	// 3. The leader's process dies: its client closes, nothing revokes its
	// lease. b (campaigning again after 2.) takes over once etcd expires it.
	waitFor(t, "b campaigns again", 30*time.Second, func() error {
		resp, err := watcher.Get(context.Background(), keys.Controller(recovery.Name)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 2 {
			return fmt.Errorf("%d candidates (%v)", resp.Count, err)
		}
		return nil
	})
	t0 = time.Now()
	_ = ca.Close()
	d = leads(t, watcher, b, 30*time.Second)
	t.Logf("handover after the leader's client died: %s (election TTL %s)", d, ttl)
	waitFor(t, "a2 knows it lost", 30*time.Second, func() error {
		if a2.c.Status().Leader {
			return fmt.Errorf("a2 still leads")
		}
		return nil
	})
	t.Logf("(%s from the client's close)", time.Since(t0))
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			m := mf.GetMetric()[0]
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func startNode(t *testing.T, ep, name string, weight int) *node.Node {
	t.Helper()
	reg := actor.NewRegistry()
	if err := builtin.Register(reg); err != nil {
		t.Fatal(err)
	}
	cfg := node.DefaultConfig()
	cfg.Name, cfg.EtcdEndpoints, cfg.Listen, cfg.HTTP = name, []string{ep}, "127.0.0.1:0", ""
	cfg.LeaseTTL = 5 * time.Second
	cfg.Weight = weight
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

func isCode(err error, code pb.Code) bool {
	var we *wire.Error
	return errors.As(err, &we) && we.Code == code
}

// Orphans of a node whose lease is gone are reported (count, gauge) by a
// report-only leader and left alone; a leader with recovery re-activates
// each on a live serving node with weight > 0 before anyone calls it, with
// objectGeneration+1; the first call of each is answered state_lost
// whether the caller knew the old generation or not, and the next runs on
// fresh state.
func TestOrphansReportedThenRecovered(t *testing.T) {
	srv := etcdtest.Single(t)
	ep := srv.Endpoint()
	cli := etcdtest.Client(t, ep)
	n1 := startNode(t, ep, "n1", 1)
	startNode(t, ep, "n2", 1)
	startNode(t, ep, "n3", 0) // a pure gateway: nothing may be recovered onto it
	ctx := context.Background()
	cl, err := client.New(ctx, client.Config{Etcd: cli})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const objects = 30
	for i := range objects {
		if _, err := cl.Call(ctx, fmt.Sprintf("actor/counter/c%02d", i), "add", "5"); err != nil {
			t.Fatal(err)
		}
	}
	st := authority.New(cli, keys)
	snaps, _, err := st.List(ctx, authority.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	victim := n1.Self()
	before := map[string]authority.Snapshot{}
	for _, s := range snaps {
		if s.Record.Owner == victim {
			before[s.Object.String()] = s
		}
	}
	if len(before) == 0 || len(before) == objects {
		t.Fatalf("placement put %d of %d objects on n1", len(before), objects)
	}

	// Report only.
	rep := start(t, cli, "reporter", nil)
	leads(t, cli, rep, 30*time.Second)
	if n := rep.c.Status().Orphans; n != 0 {
		t.Fatalf("orphans before any owner died: %d", n)
	}
	owners, _, err := lease.ListOwners(ctx, cli, keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range owners {
		if o.Descriptor.OwnerID == victim.ID {
			if _, err := cli.Revoke(ctx, clientv3.LeaseID(o.LeaseID)); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, "orphans reported", 30*time.Second, func() error {
		if n, g := rep.c.Status().Orphans, gauge(t, rep.reg, "meshloc_locationd_orphaned_objects"); n != len(before) || int(g) != len(before) {
			return fmt.Errorf("status %d, gauge %v, want %d", n, g, len(before))
		}
		l, _, err := recovery.ReadLeader(ctx, cli, keys)
		if err != nil || l.Info.Orphans != len(before) || l.Info.RecoverOrphans {
			return fmt.Errorf("leader value %+v %v", l.Info, err)
		}
		return nil
	})
	for name, s := range before {
		got, err := st.Read(ctx, s.Object)
		if err != nil || got.StoreVersion != s.StoreVersion {
			t.Fatalf("a report-only controller changed %s: %+v %v", name, got, err)
		}
	}
	rep.stop()

	// Recovery on.
	rec := start(t, cli, "recoverer", func(c *recovery.Config) { c.Recover, c.Rate = true, 1000 })
	leads(t, cli, rec, 30*time.Second)
	waitFor(t, "orphans recovered", 60*time.Second, func() error {
		if s := rec.c.Status(); s.Orphans != 0 || s.Recovered != int64(len(before)) {
			return fmt.Errorf("status %+v, want 0 orphans and %d recovered", s, len(before))
		}
		return nil
	})
	if got := counter(t, rec.reg, "meshloc_locationd_recoveries_total", "outcome", recovery.OutcomeRecovered); int(got) != len(before) {
		t.Fatalf("meshloc_locationd_recoveries_total{outcome=recovered} %v, want %d", got, len(before))
	}
	owners, _, _ = lease.ListOwners(ctx, cli, keys)
	live := map[authority.OwnerRef]lease.Owner{}
	for _, o := range owners {
		live[authority.OwnerRef{ID: o.Descriptor.OwnerID, Generation: o.Generation}] = o
	}
	for name, s := range before {
		got, err := st.Read(ctx, s.Object)
		if err != nil {
			t.Fatal(err)
		}
		o, ok := live[got.Record.Owner]
		if !ok || got.Record.Owner.ID != "n2" || o.Descriptor.Weight == 0 ||
			got.Record.ObjectGeneration != s.Record.ObjectGeneration+1 || got.Record.Node.Address != o.Descriptor.Address {
			t.Fatalf("%s after recovery: %+v (live owners %v)", name, got.Record, live)
		}
	}

	// The first call: state_lost, not executed — from a caller that knew the
	// old generation, and from one that did not; then fresh state.
	var names []string
	for name := range before {
		names = append(names, name)
	}
	first := names[0]
	if _, err := cl.Call(ctx, first, "add", "1"); !isCode(err, pb.Code_CODE_STATE_LOST) {
		t.Fatalf("first call of recovered %s by a caller that knew it: %v, want state_lost", first, err)
	}
	r, err := cl.Call(ctx, first, "get")
	if err != nil || !strings.Contains(string(r.Payload), `"value":0`) || r.Fence.ObjectGeneration != before[first].Record.ObjectGeneration+1 {
		t.Fatalf("call after state_lost: %+v %v", r, err)
	}
	if len(names) > 1 {
		fresh, err := client.New(ctx, client.Config{Nodes: []string{startNodeAddr(t, ep)}})
		if err != nil {
			t.Fatal(err)
		}
		defer fresh.Close()
		second := names[1]
		if _, err := fresh.Call(ctx, second, "add", "1"); !isCode(err, pb.Code_CODE_STATE_LOST) {
			t.Fatalf("first call of recovered %s through a gateway, by a caller that never saw it: %v, want state_lost", second, err)
		}
		if r, err := fresh.Call(ctx, second, "add", "1"); err != nil || !strings.Contains(string(r.Payload), `"value":1`) {
			t.Fatalf("second call: %+v %v", r, err)
		}
	}
}

// startNodeAddr starts one more serving node and returns its address (a
// gateway for a fresh client).
func startNodeAddr(t *testing.T, ep string) string {
	return startNode(t, ep, "gw", 1).Address()
}

func startOwner(t testing.TB, c *clientv3.Client, id string, types ...string) *lease.Keeper {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k, err := lease.Start(ctx, c, keys, lease.Config{
		OwnerID: id, TTL: 5 * time.Second,
		Descriptor: lease.Descriptor{
			RoutingID: strings.Repeat("ab", 16), Address: "127.0.0.1:1", State: lease.StateServing,
			Weight: 1, ApplicationVersion: "v1", Types: types, StartedUnixMs: 1_700_000_000_000,
		},
	})
	if err != nil {
		t.Fatalf("lease.Start %s: %v", id, err)
	}
	t.Cleanup(func() { _ = k.Close(context.Background()) })
	return k
}

func ref(k *lease.Keeper) authority.OwnerRef {
	return authority.OwnerRef{ID: k.OwnerID(), Generation: k.Generation()}
}

// An orphan still relocating to a live target is left to that target until
// its intent's deadline plus the grace; an orphan of a type no live owner
// hosts is counted no_target and left alone.
func TestRecoverWaitsForRelocationTarget(t *testing.T) {
	srv := etcdtest.Single(t)
	cli := etcdtest.Client(t, srv.Endpoint())
	ctx := context.Background()
	st := authority.New(cli, keys)
	ghost := startOwner(t, cli, "ghost")
	tgt := startOwner(t, cli, "tgt", "counter")
	moving := keyspace.Actor("counter", "moving")
	bank := keyspace.Actor("bank", "b1")
	act := func(obj keyspace.Object) authority.Snapshot {
		res, err := st.Activate(ctx, authority.ActivateRequest{Object: obj, Owner: ref(ghost), Node: authority.NodeRef{RoutingID: strings.Repeat("ab", 16), Address: "127.0.0.1:1"}})
		if err != nil || !res.Won {
			t.Fatal(res, err)
		}
		return res.Snapshot
	}
	seen := act(moving)
	act(bank)
	deadline := time.Now().Add(1500 * time.Millisecond)
	w, err := st.Intend(ctx, authority.IntentRequest{Seen: seen, Source: ref(ghost), LeaseID: ghost.LeaseID(),
		Intent: authority.Intent{RelocationID: "r1", Target: ref(tgt), TargetNode: authority.NodeRef{RoutingID: strings.Repeat("cd", 16), Address: "127.0.0.1:2"}, DeadlineMs: deadline.UnixMilli()}})
	if err != nil || !w.Written {
		t.Fatal(w, err)
	}
	if err := ghost.Close(ctx); err != nil { // revokes its lease: both objects are orphans
		t.Fatal(err)
	}
	rec := leftToTarget(t, cli, st, moving, ref(tgt), deadline)
	waitFor(t, "no_target counted", 30*time.Second, func() error {
		if n := counter(t, rec.reg, "meshloc_locationd_recoveries_total", "outcome", recovery.OutcomeNoTarget); n == 0 {
			return fmt.Errorf("no no_target yet")
		}
		return nil
	})
	if got, _ := st.Read(ctx, bank); got.Record.Owner.ID != "ghost" {
		t.Fatalf("an object no live owner hosts was moved: %+v", got.Record)
	}
	if s := rec.c.Status(); s.Orphans != 1 || s.Recovered != 1 || s.Failed != 0 {
		t.Fatalf("status %+v, want 1 orphan left (the bank), 1 recovered, none failed", s)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func(*recovery.Config)
	}{
		{"no id", func(c *recovery.Config) { c.ID = "" }},
		{"ttl under 1s", func(c *recovery.Config) { c.TTL = 500 * time.Millisecond }},
		{"rate 0", func(c *recovery.Config) { c.Rate = 0 }},
		{"negative grace", func(c *recovery.Config) { c.Grace = -time.Second }},
	} {
		c := recovery.DefaultConfig()
		c.ID = "x"
		tc.mut(&c)
		if _, err := recovery.New(nil, keys, c, zerolog.Nop(), nil); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}
