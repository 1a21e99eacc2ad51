//go:build failpoints

package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
)

// The failpoint drain (hit during a drain, between its objects): an
// error at the 3rd object ends the drain there; the objects already moved
// serve on their new owner, the others are reported with the reason and
// counted as failed, and nothing is lost before the node stops.
func TestFaultDrainStep(t *testing.T) {
	fm := startFaultMesh(t, 1, func(_ int, c *node.Config) { c.DrainConcurrency = 1 })
	c := newClient(t, client.Config{Etcd: fm.etcd})
	var names []string
	for i := range 5 {
		name := fmt.Sprintf("actor/counter/fd%d", i)
		if _, err := c.Call(context.Background(), name, "add", "2"); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	fm.add(t, "n2")
	n1 := fm.nodes[0]
	arm(t, failpoint.DrainStep, "error@3")
	rep, err := n1.Drain(context.Background(), node.DrainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Moved) != 2 || len(rep.Failed) != 3 || !strings.Contains(rep.EndedEarly, "failpoint drain") {
		t.Fatalf("report: moved %d, failed %+v, ended early %q", len(rep.Moved), rep.Failed, rep.EndedEarly)
	}
	for _, f := range rep.Failed {
		if !strings.Contains(f.Reason, "failpoint drain") {
			t.Errorf("failure %+v", f)
		}
	}
	if n1.Hosted() != 3 {
		t.Fatalf("n1 hosts %d, want the 3 not moved", n1.Hosted())
	}
	for _, name := range names {
		r, err := c.Call(context.Background(), name, "get")
		if err != nil || value(t, r) != 2 {
			t.Fatalf("%s after the drain: %v", name, err)
		}
	}
	if got := fm.metricSum(t, n1, "meshloc_drain_objects_total", map[string]string{"outcome": "moved"}); got != 2 {
		t.Errorf("meshloc_drain_objects_total{outcome=moved} = %v, want 2", got)
	}
	if got := fm.metricSum(t, n1, "meshloc_drain_objects_total", map[string]string{"outcome": "failed"}); got != 3 {
		t.Errorf("meshloc_drain_objects_total{outcome=failed} = %v, want 3", got)
	}
}
