package bench

import (
	"context"
	"testing"
	"time"
)

// The memory and join parts on a few hundred objects and records, with
// short windows: each figure measured beside its stated bound. The numbers
// are not checked (a shared machine).
func TestScaleMemoryJoinTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and node processes")
	}
	x := &run{cfg: Config{}, ctx: context.Background(), dir: t.TempDir(), r: &Report{}}
	p := ScalePlan{Objects: 300, JoinRecords: 2000, Settle: 3 * time.Second, NodeArgs: []string{"--dedup-window", "1s"}}
	if err := x.scaleMemory(p); err != nil {
		t.Fatal(err)
	}
	if err := x.scaleJoin(p); err != nil {
		t.Fatal(err)
	}
	if len(x.r.Baselines) != 3 || len(x.r.Figures) != 4 {
		t.Fatalf("baselines %+v, figures %+v", x.r.Baselines, x.r.Figures)
	}
	for _, f := range x.r.Figures {
		if f.Value <= 0 || f.Baseline.Value <= 0 {
			t.Errorf("figure %q: %+v", f.Name, f)
		}
	}
}
