package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/bench/durablebench"
	"github.com/meshloc/meshloc/internal/pgserver"
)

// The durable section with a few writes and wakes: every figure measured,
// beside its baseline. The numbers are not checked (a shared machine).
// Without PostgreSQL's binaries it is skipped, unless CI=true (.ci/run
// installs them): then it fails.
func TestDurableTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, node processes and a PostgreSQL server")
	}
	if pgserver.Bin() == "" {
		const how = "no PostgreSQL binaries (initdb, postgres): install them with `apt-get install postgresql` (or set MESHLOC_PG_BIN)"
		if os.Getenv("CI") == "true" {
			t.Fatal(how + "; .ci/run installs them")
		}
		t.Skip(how)
	}
	x := &run{cfg: Config{Plan: Plan{Durable: durablebench.Plan{Writes: 60, Wakes: 3, SleepAfter: 500 * time.Millisecond}}},
		ctx: context.Background(), dir: t.TempDir(), r: &Report{}}
	if err := x.durable(); err != nil {
		t.Fatal(err)
	}
	if len(x.r.Baselines) != 4 || len(x.r.Figures) != 6 {
		t.Fatalf("baselines %+v, figures %+v", x.r.Baselines, x.r.Figures)
	}
	for _, b := range x.r.Baselines {
		if b.Value <= 0 || b.N <= 0 {
			t.Errorf("baseline %q: %+v", b.Name, b)
		}
	}
	bounded := 0
	for _, f := range x.r.Figures {
		if f.Value <= 0 || f.Baseline.Value <= 0 || f.Ratio <= 0 {
			t.Errorf("figure %q: %+v", f.Name, f)
		}
		if f.Target != nil {
			bounded++
		}
	}
	if bounded != 2 || !strings.Contains(x.r.Figures[5].Name, "wake") {
		t.Errorf("figures %+v: want the PostgreSQL store's write and claim bounded, the wake last", x.r.Figures)
	}
}

// A run asked for the durable section without PostgreSQL's binaries (here:
// MESHLOC_PG_BIN names a directory without them) fails before it measures
// anything, saying how to install them.
func TestDurableWithoutPostgres(t *testing.T) {
	t.Setenv("MESHLOC_PG_BIN", t.TempDir())
	_, err := Run(context.Background(), Config{Plan: QuickPlan(), Only: []string{"durable"}, Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "apt-get install postgresql") {
		t.Fatalf("err = %v, want one saying to install postgresql", err)
	}
}
