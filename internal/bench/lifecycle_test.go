package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The lifecycle section on a few hundred objects with short windows: every
// figure measured, beside its baseline where it has one. The numbers are
// not checked (a shared machine).
func TestLifecycleTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and a node process")
	}
	x := &run{cfg: Config{Plan: Plan{Window: 500 * time.Millisecond, Lifecycle: LifecyclePlan{Objects: 300, SleepAfter: 500 * time.Millisecond, Settle: time.Second}}},
		ctx: context.Background(), dir: t.TempDir(), r: &Report{}}
	if err := x.lifecycle(); err != nil {
		t.Fatal(err)
	}
	if len(x.r.Baselines) != 6 || len(x.r.Figures) != 8 {
		t.Fatalf("baselines %+v, figures %+v", x.r.Baselines, x.r.Figures)
	}
	for _, f := range x.r.Figures {
		if f.Value <= 0 && f.Unit != "%" { // a share may be 0 (no firing missing)
			t.Errorf("figure %q: %+v", f.Name, f)
		}
	}
}

// The lifecycle section knows two state stores; another is refused before
// anything starts, and etcd's needs nothing.
func TestLifecycleStore(t *testing.T) {
	x := &run{ctx: context.Background(), r: &Report{}}
	if _, err := x.lifecycleStore(x.ctx, "mysql"); err == nil || !strings.Contains(err.Error(), "want etcd or postgres") {
		t.Fatalf("an unknown store: %v", err)
	}
	stop, err := x.lifecycleStore(x.ctx, "etcd")
	if err != nil || len(x.lifeArgs("--a")) != 1 {
		t.Fatalf("etcd's store: %v, args %v", err, x.lifeArgs("--a"))
	}
	stop()
}
