package bench

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/bench/report"
)

// The peers section on a tiny plan: both clusters built (the peer from
// bench/peers with the go command), every figure beside its Proto.Actor
// baseline, and meshloc's drain under load keeping every counter's value.
// The numbers are not checked (a shared machine).
func TestPeersTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the peer, starts etcd, 4 meshnode and 4 Proto.Actor processes")
	}
	plan := QuickPlan()
	plan.Ops, plan.Window = 20, 400*time.Millisecond
	r, err := Run(context.Background(), Config{Plan: plan, Dir: t.TempDir(), Only: []string{"peers"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Baselines) != 10 || len(r.Figures) != 13 {
		t.Fatalf("%d baselines, %d figures:\n%+v\n%+v", len(r.Baselines), len(r.Figures), r.Baselines, r.Figures)
	}
	if b := r.Baselines[0]; !strings.Contains(b.Note, "github.com/asynkron/protoactor-go v") {
		t.Errorf("the peer's version is not stated: %q", b.Note)
	}
	for _, f := range r.Figures {
		if f.Baseline.Unit != f.Unit || !strings.HasPrefix(f.Baseline.Name, "Proto.Actor ") {
			t.Errorf("figure %q: baseline %+v", f.Name, f.Baseline)
		}
		if (f.Unit == "ms" || f.Unit == "/s") && (f.Value <= 0 || f.Ratio <= 0) {
			t.Errorf("figure %q: %+v", f.Name, f)
		}
	}
	var targets int
	for _, f := range r.Figures {
		if f.Target != nil {
			targets++
		}
	}
	if targets != 4 {
		t.Errorf("%d targets, want 4", targets)
	}
	drain := r.Figure("peers: drain under load: counters restarted from zero")
	if drain.Unit != "%" || drain.Value != 0 || drain.Note != fmt.Sprintf("0 of %d", peersObjects) {
		t.Errorf("a drain under load lost counters: %+v", drain)
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	back, err := report.ReadJSON(&js)
	if err != nil || len(back.Figures) != 13 || back.Figures[0].Baseline.Value != r.Baselines[0].Value {
		t.Fatalf("the JSON report does not carry the baselines: %v", err)
	}
}

// The load and the read count what a counter acknowledged alike on both
// sides: with a counter that never forgets, every value is its first add
// plus the acknowledged ones; with one that fails some calls, those are
// not counted.
func TestPeersLoadAccounting(t *testing.T) {
	var mu sync.Mutex
	vals := map[string]int64{}
	var calls int
	add := func(object string, delta int64) (int64, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if delta != 0 && calls%7 == 0 {
			return 0, fmt.Errorf("failed")
		}
		vals[object] += delta
		return vals[object], nil
	}
	if el, failed := measureActivate(add, "c", 16, 4); failed != 2 || el <= 0 { // calls 7 and 14
		t.Fatalf("activate: %d failed", failed)
	}
	for i := range 16 { // the failed firsts: create them
		if _, ok := vals[fmt.Sprintf("c%d", i)]; !ok {
			vals[fmt.Sprintf("c%d", i)] = 1
		}
	}
	l := startLoad(add, "c", 16, 3)
	time.Sleep(20 * time.Millisecond)
	st := l.status()
	r := l.stop()
	if r.OK+r.Failed < st.OK+st.Failed || r.Failed == 0 || r.LastFailUnixNs < r.FirstFailUnixNs || r.OldestCallUnixNs != 0 {
		t.Fatalf("load: %+v (status %+v)", r, st)
	}
	var acked int64
	values := measureRead(add, "c", 16)
	for i, v := range values {
		acked += r.Acked[i]
		if v != 1+r.Acked[i] {
			t.Errorf("counter %d: value %d, acknowledged 1+%d", i, v, r.Acked[i])
		}
	}
	if acked != r.OK {
		t.Errorf("acknowledged %d, ok %d", acked, r.OK)
	}
}

func TestCounterValue(t *testing.T) {
	if v, err := counterValue([]byte(`{"value":-42}`)); err != nil || v != -42 {
		t.Fatalf("%d %v", v, err)
	}
	for _, p := range []string{``, `{"value":}`, `{"value":1`, `{"v":1}`, `{"value":x}`} {
		if _, err := counterValue([]byte(p)); err == nil {
			t.Errorf("%q: no error", p)
		}
	}
}
