package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestPct(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(101-i))
	}
	if pct(d, 50) != 50 || pct(d, 99) != 99 || pct(d, 100) != 100 || pct(nil, 50) != 0 || pct(d[:1], 99) != 100 {
		t.Fatal(pct(d, 50), pct(d, 99))
	}
}

func TestRunRefusesAnEmptyPlan(t *testing.T) {
	if _, err := Run(context.Background(), Config{Plan: Plan{Name: "bad"}}); err == nil {
		t.Fatal("an empty plan ran")
	}
}

// TestTinyRun runs every measurement with a few samples each, on the real
// embedded etcd and real nodes: every baseline and figure is measured, and
// every target of the issue is there with a verdict. The numbers are not
// checked: this machine is shared (docs/contributing.md: no timed assertions).
func TestTinyRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and three nodes")
	}
	plan := Plan{Name: "tiny", Ops: 20, Window: 200 * time.Millisecond, Stream: 4 << 20, Sizes: []Size{
		{"1 KiB", 1 << 10, 4, 3}, {"64 KiB", 64 << 10, 2, 2},
	}, Groups: []int{2, 8}, Pairs: 30}
	r, err := Run(context.Background(), Config{Plan: plan, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range r.Baselines {
		if b.Value <= 0 || b.N <= 0 {
			t.Errorf("baseline %q not measured: %+v", b.Name, b)
		}
	}
	targets := 0
	for _, f := range r.Figures {
		if (f.Value <= 0 || f.Ratio <= 0) && f.Unit != "%" || f.Baseline.Value <= 0 {
			t.Errorf("figure %q not measured: %+v", f.Name, f)
		}
		if f.Target != nil {
			targets++
		}
	}
	// 1 KiB: CAS p50, CAS p99 and the peer; 64 KiB: the peer; relocations
	// at 64 in flight; groups; streaming; idle calls: the Go client's p50,
	// the gateway's p50 and calls/s; storm: both paths' calls/s and the
	// p99 of objects not moving; the session call p50; messages/s and
	// the cross-node share after co-location.
	if targets != 16 {
		t.Errorf("%d figures with a target, want 16", targets)
	}
	var text, js bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"BASELINE", "MESHLOC FIGURE", "stop-persist-reload p50, 64 KiB", "relocations/s, 64 in flight", "session push p99, relocation storm",
		"calls/s, Go client direct, foreground relocation storm, 64 in flight", "call p99, Go client direct, not moving, foreground relocation storm", "targets met:"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the text report has no %q:\n%s", want, text.String())
		}
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Figures) != len(r.Figures) || back.Figures[0].Target == nil {
		t.Fatalf("JSON report does not read back: %v", err)
	}
}

// The scale section's recovery part at a tiny scale: a node child of 500
// counters killed -9, its orphans recovered by locationd's controller,
// the figure measured beside its CAS baseline with its target.
func TestScaleRecoveryTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, a node child, two nodes and locationd")
	}
	plan := QuickPlan()
	plan.Window = 500 * time.Millisecond
	plan.Scale = ScalePlan{Objects: 500, Parts: []string{"recovery"}}
	r, err := Run(context.Background(), Config{Plan: plan, Dir: t.TempDir(), Only: []string{"scale"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Figures) != 1 {
		t.Fatalf("figures %+v, want the recovery's", r.Figures)
	}
	f := r.Figures[0]
	if f.Name != "recovery of 500 orphans after kill -9, objects/s" || f.Value <= 0 || f.N != 500 || f.Baseline.Value <= 0 || f.Ratio <= 0 || f.Target == nil {
		t.Fatalf("recovery figure %+v", f)
	}
}
