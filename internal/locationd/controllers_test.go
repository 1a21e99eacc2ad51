package locationd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/locationd/recovery"
	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
)

func waitUntil(t *testing.T, what string, d time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %v", what, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func controllerOf(t *testing.T, r *running) api.Controller {
	t.Helper()
	resp, raw, err := r.api.Controllers(context.Background())
	if err != nil || len(resp.Controllers) != 1 || resp.Controllers[0].Name != "recovery" {
		t.Fatalf("/v1/controllers: %s %v", raw, err)
	}
	return resp.Controllers[0]
}

// GET /v1/controllers on two locationd against one etcd names the same
// leader; the leader's clean stop hands the role over at once.
func TestControllersRoute(t *testing.T) {
	ep := etcdtest.Single(t).Endpoint()
	first := start(t, func(c *Config) { c.EtcdEndpoints, c.ElectionTTL = []string{ep}, 2*time.Second })
	waitUntil(t, "first leads", 30*time.Second, func() error {
		if c := controllerOf(t, first); !c.Self.Leader || c.Leader == nil || c.Leader.ID != c.Self.ID || c.Leader.SinceUnixMs == 0 {
			return fmt.Errorf("%+v", c)
		}
		return nil
	})
	c := controllerOf(t, first)
	if c.Self.HTTP != first.srv.HTTPAddr() || c.Leader.HTTP != c.Self.HTTP || c.Self.ElectionTTLMs != 2000 || c.Self.RecoverOrphans ||
		c.Self.Terms != 1 || c.Leader.Revision == 0 || c.Self.Since == "" {
		t.Fatalf("controller %+v leader %+v", c, *c.Leader)
	}

	// The second publishes the address given by --advertise-http.
	second := start(t, func(c *Config) {
		c.EtcdEndpoints, c.ElectionTTL, c.AdvertiseHTTP = []string{ep}, 2*time.Second, "locationd2:7070"
	})
	waitUntil(t, "second campaigns", 30*time.Second, func() error {
		resp, err := first.etcd(t).Get(context.Background(), keyspace.Default().Controller("recovery")+"/", clientv3WithPrefixCount()...)
		if err != nil || resp.Count != 2 {
			return fmt.Errorf("candidates: %v %v", resp, err)
		}
		return nil
	})
	c2 := controllerOf(t, second)
	// (In one test process both have the same id, hostname/pid: their API
	// addresses tell them apart.)
	if c2.Self.Leader || c2.Leader == nil || c2.Leader.HTTP != c.Self.HTTP || c2.Self.HTTP != "locationd2:7070" || c2.Leader.Revision != c.Leader.Revision {
		t.Fatalf("second: %+v, leader %+v", c2, c2.Leader)
	}

	// Bad input.
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/v1/controllers?x=1", 400},
		{"POST", "/v1/controllers", 405},
	} {
		req, _ := http.NewRequest(tc.method, second.base+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.status)
		}
	}
	metrics := get(t, second.base+"/metrics")
	if !strings.Contains(metrics, `meshloc_locationd_controller_leader{controller="recovery"} 0`) || !strings.Contains(metrics, "meshloc_locationd_orphaned_objects 0") {
		t.Fatalf("metrics of the follower lack the controller's:\n%s", metrics)
	}

	// The leader stops: it revokes its lease, the other leads at once.
	t0 := time.Now()
	first.stop(t)
	waitUntil(t, "second leads", 30*time.Second, func() error {
		if c := controllerOf(t, second); !c.Self.Leader || c.Leader == nil || c.Leader.HTTP != c2.Self.HTTP {
			return fmt.Errorf("%+v", c)
		}
		return nil
	})
	t.Logf("handover after the leader's clean stop: %s", time.Since(t0))
	if m := get(t, second.base+"/metrics"); !strings.Contains(m, `meshloc_locationd_controller_leader{controller="recovery"} 1`) {
		t.Fatal("the new leader's meshloc_locationd_controller_leader is not 1")
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}

// The rebalancer over in-process nodes: 12 counters gathered on n1 and one
// pinned record there; the plan moves counters (reason load) and never the
// pinned one; a dry run moves nothing; runs within a budget continue until
// balanced; the counters keep their values.
func TestRebalanceThroughAPI(t *testing.T) {
	m := startMesh(t, 3)
	ctx := context.Background()
	cl, err := client.New(ctx, client.Config{Etcd: m.etcd})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const objects = 12
	name := func(i int) string { return fmt.Sprintf("actor/counter/r%02d", i) }
	for i := range objects {
		if _, err := cl.Call(ctx, name(i), "add", fmt.Sprint(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	n1 := m.nodes[0].Self()
	for i := range objects {
		if m.owner(t, name(i)).ID != n1.ID {
			rel, raw, err := m.ld.api.Relocate(ctx, apiRelocate(name(i), n1.ID, 0))
			if err != nil || rel.Outcome != api.OutcomeCompleted {
				t.Fatalf("gather %s on n1: %s %v", name(i), raw, err)
			}
		}
	}
	st := authority.New(m.etcd, keyspace.Default())
	owners, _, err := lease.ListOwners(ctx, m.etcd, keyspace.Default())
	if err != nil {
		t.Fatal(err)
	}
	i1 := slices.IndexFunc(owners, func(o lease.Owner) bool { return o.Descriptor.OwnerID == n1.ID })
	pinned := keyspace.Actor("counter", "pinned")
	if res, err := st.Activate(ctx, authority.ActivateRequest{Object: pinned, Owner: n1, Pinned: true,
		Node: authority.NodeRef{RoutingID: owners[i1].Descriptor.RoutingID, Address: owners[i1].Descriptor.Address}}); err != nil || !res.Won {
		t.Fatal(res, err)
	}
	lc := m.ld.api

	plan, raw, err := lc.RebalancePlanOf(ctx, 100)
	if err != nil || !plan.DryRun || plan.Budget != 100 || plan.BudgetExhausted || len(plan.Moves) == 0 {
		t.Fatalf("plan: %s %v", raw, err)
	}
	for _, mv := range plan.Moves {
		if mv.Reason != "load" || mv.From != n1.ID || mv.Object == pinned.String() || mv.Outcome != "" || mv.Units != 1 {
			t.Fatalf("move %+v", mv)
		}
	}
	after := map[string]int{}
	for _, o := range plan.Owners {
		after[o.ID] = o.After
		// Within the tolerance, or one object above it when no move can
		// lower the imbalance (13 over 3 nodes: 5, 4, 4).
		if o.Fair == 0 || float64(o.After) > math.Ceil(o.Fair*(1+plan.Tolerance)) {
			t.Fatalf("owner %+v over its share after the plan: %s", o, raw)
		}
	}
	if after[n1.ID] != 13-len(plan.Moves) {
		t.Fatalf("plan %s", raw)
	}
	t.Logf("plan: %d moves, loads after %v", len(plan.Moves), after)

	// A dry run through POST: the same plan; nothing moves.
	dry, _, err := lc.Rebalance(ctx, api.RebalanceRequest{Budget: 100, DryRun: true})
	if err != nil || !dry.DryRun || len(dry.Moves) != len(plan.Moves) || dry.Completed != 0 {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	for i := range objects {
		if m.owner(t, name(i)).ID != n1.ID {
			t.Fatalf("a dry run moved %s", name(i))
		}
	}

	// Run within a budget of 3, then again until nothing is left.
	run, raw, err := lc.Rebalance(ctx, api.RebalanceRequest{Budget: 3})
	if err != nil || run.DryRun || len(run.Moves) != 3 || run.Completed != 3 || run.Failed != 0 || !run.BudgetExhausted {
		t.Fatalf("run with budget 3: %s %v", raw, err)
	}
	for _, mv := range run.Moves {
		if mv.Outcome != api.OutcomeCompleted || mv.RelocationID == "" || m.owner(t, mv.Object).ID != mv.To {
			t.Fatalf("move %+v", mv)
		}
	}
	rest, raw, err := lc.Rebalance(ctx, api.RebalanceRequest{})
	if err != nil || rest.Budget != api.DefaultRebalanceBudget || rest.Completed != len(plan.Moves)-3 || rest.Failed != 0 || rest.BudgetExhausted {
		t.Fatalf("the rest: %s %v", raw, err)
	}
	again, raw, err := lc.RebalancePlanOf(ctx, 0)
	if err != nil || len(again.Moves) != 0 {
		t.Fatalf("a plan after running it: %s %v", raw, err)
	}
	counts := map[string]int{}
	for i := range objects {
		counts[m.owner(t, name(i)).ID]++
		r, err := cl.Call(ctx, name(i), "get")
		if err != nil || !strings.Contains(string(r.Payload), fmt.Sprintf(`"value":%d`, i+1)) {
			t.Fatalf("%s after the rebalance: %+v %v", name(i), r, err)
		}
	}
	if o := m.owner(t, pinned.String()); o != n1 {
		t.Fatalf("the pinned object moved to %s", o)
	}
	t.Logf("counters per node after the rebalance: %v (+1 pinned on %s)", counts, n1.ID)
	if metrics := get(t, m.ld.base+"/metrics"); !strings.Contains(metrics, `meshloc_rebalance_moves_total{outcome="completed",reason="load"} `+fmt.Sprint(len(plan.Moves))) {
		t.Fatalf("meshloc_rebalance_moves_total:\n%s", metrics)
	}

	// Bad input: a typed error, and nothing moves.
	for _, tc := range []struct {
		method, path, body string
		status             int
	}{
		{"GET", "/v1/rebalance/plan?budget=0", "", 400},
		{"GET", "/v1/rebalance/plan?budget=-1", "", 400},
		{"GET", "/v1/rebalance/plan?budget=x", "", 400},
		{"GET", "/v1/rebalance/plan?budget=10001", "", 400},
		{"GET", "/v1/rebalance/plan?bugdet=3", "", 400},
		{"POST", "/v1/rebalance/plan", "", 405},
		{"GET", "/v1/rebalance", "", 405},
		{"POST", "/v1/rebalance", "", 400},
		{"POST", "/v1/rebalance", `{"budget":5,"dry":true}`, 400},
		{"POST", "/v1/rebalance", `{"budget":-2}`, 400},
		{"POST", "/v1/rebalance", `{"budget":1}{}`, 400},
		{"POST", "/v1/rebalance?x=1", `{"budget":1}`, 400},
	} {
		req, _ := http.NewRequest(tc.method, m.ld.base+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s %s: %d, want %d", tc.method, tc.path, tc.body, resp.StatusCode, tc.status)
		}
	}
	for i := range objects {
		counts[m.owner(t, name(i)).ID]--
	}
	for id, n := range counts {
		if n != 0 {
			t.Fatalf("bad input moved objects of %s", id)
		}
	}
}

func clientv3WithPrefixCount() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCountOnly()}
}

func TestControllerFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func(*Config)
	}{
		{"election ttl under 1s", func(c *Config) { c.ElectionTTL = 500 * time.Millisecond }},
		{"election ttl over 1h", func(c *Config) { c.ElectionTTL = 2 * time.Hour }},
		{"recovery rate 0", func(c *Config) { c.RecoveryRate = 0 }},
		{"recovery rate negative", func(c *Config) { c.RecoveryRate = -1 }},
	} {
		c := DefaultConfig()
		tc.mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", tc.name, err)
		}
	}
	c := DefaultConfig()
	if err := c.Validate(); err != nil || c.ElectionTTL != 5*time.Second || c.RecoverOrphans || c.RecoveryRate != recovery.DefaultRate {
		t.Fatalf("defaults %+v: %v", c, err)
	}
}
