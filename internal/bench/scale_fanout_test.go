package bench

import (
	"context"
	"testing"
	"time"
)

// TestScaleFanoutTiny runs the fan-out part with a few followers and short
// windows: both settings' baselines and figures are measured (etcd's CPU
// per relocation, through the fan-out and straight on etcd), the first
// with its target. The numbers are not checked (a shared machine).
func TestScaleFanoutTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd process and two nodes")
	}
	x := &run{cfg: Config{Plan: Plan{Window: 200 * time.Millisecond}}, ctx: context.Background(), dir: t.TempDir(), r: &Report{}}
	if err := x.scaleFanout(ScalePlan{Followers: [2]int{1, 3}}); err != nil {
		t.Fatal(err)
	}
	if len(x.r.Baselines) != 2 || len(x.r.Figures) != 2 {
		t.Fatalf("baselines %+v, figures %+v", x.r.Baselines, x.r.Figures)
	}
	for _, b := range x.r.Baselines {
		if b.Value <= 0 || b.N <= 0 {
			t.Errorf("baseline %q not measured: %+v", b.Name, b)
		}
	}
	for _, f := range x.r.Figures {
		if f.Value <= 0 || f.Ratio <= 0 || f.Baseline.Value <= 0 {
			t.Errorf("figure %q not measured: %+v", f.Name, f)
		}
	}
	if x.r.Figures[0].Target == nil || x.r.Figures[1].Target != nil {
		t.Errorf("targets: %+v, %+v", x.r.Figures[0].Target, x.r.Figures[1].Target)
	}
}
