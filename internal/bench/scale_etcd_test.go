package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The scale section's etcd part, with a storm of 3 s: it runs, and makes
// its two figures with their targets and baselines. The numbers are not
// checked (a shared machine; the figures are for meshctl bench).
func TestScaleEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and two nodes, and storms for 3 s")
	}
	plan := QuickPlan()
	plan.Scale = ScalePlan{Storm: 3 * time.Second, Parts: []string{"etcd"}}
	r, err := Run(context.Background(), Config{Plan: plan, Dir: t.TempDir(), Only: []string{"scale"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Figures) != 2 {
		t.Fatalf("%d figures, want 2: %+v", len(r.Figures), r.Figures)
	}
	for _, f := range r.Figures {
		if f.Value <= 0 || f.Baseline.Value <= 0 || f.Target == nil {
			t.Errorf("figure %q not measured: %+v", f.Name, f)
		}
	}
	if f := r.Figures[0]; !strings.HasPrefix(f.Name, "etcd db in use, peak of the storm's last") || !strings.Contains(f.Note, "relocations") {
		t.Errorf("first figure %+v", f)
	}
	if f := r.Figures[1]; !strings.Contains(f.Note, "alarms raised: 0") {
		t.Errorf("an alarm during a 3 s storm under a 256 MiB quota: %+v", f)
	}
}
