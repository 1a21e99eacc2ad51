package locationd

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/client"
)

// The co-location mode over in-process nodes: pairs of banks on different
// nodes send each other chains by message; the plan (from the nodes'
// traffic sketches) moves one bank of each pair next to the other, within
// the load tolerance, and shows the cross-node fraction falling; run, the
// pairs share a node and a new plan wants nothing.
func TestRebalanceColocateThroughAPI(t *testing.T) {
	m := startMesh(t, 3)
	ctx := context.Background()
	cl, err := client.New(ctx, client.Config{Etcd: m.etcd})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ids := []string{m.nodes[0].Self().ID, m.nodes[1].Self().ID, m.nodes[2].Self().ID}
	place := func(obj, on string) {
		if _, err := cl.Call(ctx, obj, "read"); err != nil {
			t.Fatal(err)
		}
		if m.owner(t, obj).ID != on {
			if rel, raw, err := m.ld.api.Relocate(ctx, apiRelocate(obj, on, 0)); err != nil || rel.Outcome != api.OutcomeCompleted {
				t.Fatalf("place %s on %s: %s %v", obj, on, raw, err)
			}
		}
	}
	// Ballast: 10 idle banks per node, so that moves fit the tolerance.
	for i := range 30 {
		place(fmt.Sprintf("actor/bank/idle%02d", i), ids[i%3])
	}
	const pairs = 6
	a := func(i int) string { return fmt.Sprintf("actor/bank/a%d", i) }
	b := func(i int) string { return fmt.Sprintf("actor/bank/b%d", i) }
	for i := range pairs {
		place(a(i), ids[i%3])
		place(b(i), ids[(i+1)%3])
	}
	for k := range 5 {
		for i := range pairs {
			if _, err := cl.Call(ctx, a(i), "chain", fmt.Sprintf("c%d-%d", i, k), "1", b(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	lc := m.ld.api
	var plan api.RebalancePlan
	waitUntil(t, "every message answered and counted", 30*time.Second, func() error {
		var err error
		var raw []byte
		plan, raw, err = lc.RebalancePlanColocate(ctx, 100)
		if err != nil {
			return err
		}
		if plan.Traffic == nil || plan.Traffic.Total < pairs*5 {
			return fmt.Errorf("traffic %s", raw)
		}
		return nil
	})
	tr := plan.Traffic
	if !plan.Colocate || tr.Nodes != 3 || tr.Edges != pairs || tr.FractionBefore != 1 || tr.FractionAfter != 0 || len(plan.Moves) != pairs {
		t.Fatalf("plan: %+v traffic %+v", plan, *tr)
	}
	for _, mv := range plan.Moves {
		if mv.Reason != "colocate" {
			t.Fatalf("move %+v", mv)
		}
	}
	for _, o := range plan.Owners {
		if float64(o.After) > o.Fair*(1+plan.Tolerance)+1e-9 {
			t.Fatalf("owner %+v over its share", o)
		}
	}
	run, raw, err := lc.Rebalance(ctx, api.RebalanceRequest{Budget: 100, Colocate: true})
	if err != nil || run.Completed != pairs || run.Failed != 0 {
		t.Fatalf("run: %s %v", raw, err)
	}
	for i := range pairs {
		if m.owner(t, a(i)) != m.owner(t, b(i)) {
			t.Fatalf("pair %d apart after the run", i)
		}
	}
	again, raw, err := lc.RebalancePlanColocate(ctx, 0)
	if err != nil || len(again.Moves) != 0 || again.Traffic == nil || again.Traffic.FractionBefore != 0 {
		t.Fatalf("a plan after running it: %s %v", raw, err)
	}
	if metrics := get(t, m.ld.base+"/metrics"); !strings.Contains(metrics, `meshloc_rebalance_moves_total{outcome="completed",reason="colocate"} `+fmt.Sprint(pairs)) {
		t.Fatal("meshloc_rebalance_moves_total has no completed colocate moves")
	}
	// Bad input.
	if _, _, err := lc.RebalancePlanColocate(ctx, -1); err == nil {
		t.Fatal("budget -1 accepted")
	}
	if s := get(t, m.ld.base+"/v1/rebalance/plan?colocate=maybe"); !strings.Contains(s, "invalid_argument") {
		t.Fatalf("colocate=maybe: %s", s)
	}
}
