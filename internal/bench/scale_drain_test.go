package bench

import (
	"context"
	"strings"
	"testing"
)

// The scale section's drain part on a few hundred objects: both figures
// measured beside their baseline, the drain's note saying nothing failed.
// The numbers are not checked (a shared machine).
func TestScaleDrainTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and three nodes")
	}
	x := &run{cfg: Config{}, ctx: context.Background(), dir: t.TempDir(), r: &Report{}}
	if err := x.scaleDrain(ScalePlan{Objects: 300}); err != nil {
		t.Fatal(err)
	}
	if len(x.r.Baselines) != 1 || len(x.r.Figures) != 2 {
		t.Fatalf("baselines %+v, figures %+v", x.r.Baselines, x.r.Figures)
	}
	for _, f := range x.r.Figures {
		if f.Value <= 0 || f.Ratio <= 0 || f.Target == nil {
			t.Errorf("figure %q: %+v", f.Name, f)
		}
	}
	if d := x.r.Figures[1]; !strings.HasPrefix(d.Note, "moved 300, failed 0") {
		t.Errorf("drain: %s", d.Note)
	}
}
