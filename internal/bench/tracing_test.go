package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/bench/tracebench"
)

// The tracing section with one short round: four nodes measured, the
// sampled ones' spans counted (a short window may end before a batch is
// sent: how many is not checked, nor are the numbers: a shared machine).
func TestTracingTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and four node processes")
	}
	x := &run{cfg: Config{Plan: Plan{Tracing: tracebench.Plan{Rounds: 1, Window: 300 * time.Millisecond, Callers: 2}}},
		ctx: context.Background(), dir: t.TempDir(), r: &Report{}}
	if err := x.tracing(); err != nil {
		t.Fatal(err)
	}
	if len(x.r.Baselines) != 1 || len(x.r.Figures) != 3 {
		t.Fatalf("baselines %+v, figures %+v", x.r.Baselines, x.r.Figures)
	}
	for _, f := range x.r.Figures {
		if f.Value <= 0 || f.Baseline.Value <= 0 || f.Ratio <= 0 {
			t.Errorf("figure %q: %+v", f.Name, f)
		}
		if strings.Contains(f.Name, "sampled") && !strings.Contains(f.Note, "spans received") {
			t.Errorf("figure %q: %s", f.Name, f.Note)
		}
	}
	if x.r.Figures[0].Target == nil {
		t.Error("the 1% figure has no bound")
	}
}
