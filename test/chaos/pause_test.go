package chaos_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/chaos"
	"github.com/meshloc/meshloc/internal/verify"
)

// TestPausedOwnerServesNothing (issue 6, self-fencing): SIGSTOP of the
// busiest owner for 3 lease TTLs while callers run, then SIGCONT. Its objects
// are served elsewhere meanwhile; no reply it served is accepted after another
// owner served the same object; and once woken it executes nothing (its
// execution log has no line after SIGCONT).
func TestPausedOwnerServesNothing(t *testing.T) {
	s := base(t)
	s.Workloads = []string{"register", "list"}
	s.Faults = []string{chaos.PauseNode}
	// One fault: Schedule places a fault at t only if t+FaultEvery/2 fits in
	// the run, so a spacing of an hour would schedule none.
	s.FirstFault, s.FaultEvery = 4*time.Second, 30*time.Second
	s.Duration = 20 * time.Second
	checked := false
	s.Inspect = func(c *chaos.Cluster, rep *verify.Report) {
		checked = true
		var stop, cont chaos.Event
		for _, e := range c.Events() {
			switch e.What {
			case "sigstop":
				stop = e
			case "sigcont":
				cont = e
			}
		}
		if cont.Node == "" {
			t.Fatalf("no SIGCONT in %v", c.Events())
		}
		victim, gen := stop.Node, stop.Gen
		t.Logf("paused %s@%d for %v", victim, gen, cont.At.Sub(stop.At).Round(time.Millisecond))

		// The woken owner executed nothing.
		after := 0
		f, err := os.Open(c.Node(victim).ExecLog)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var l struct {
				Owner string `json:"owner"`
				Gen   int64  `json:"ownerGeneration"`
				T     int64  `json:"t"`
			}
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Owner == victim && l.Gen == gen && l.T > cont.At.UnixNano() {
				after++
			}
		}
		if after > 0 {
			t.Errorf("%s@%d executed %d requests after SIGCONT", victim, gen, after)
		}

		// No reply of the paused owner accepted after another owner served
		// the object.
		b, err := os.ReadFile(filepath.Join(s.ArtifactDir, "history.json"))
		if err != nil {
			t.Fatal(err)
		}
		var d verify.Dump
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		// For each object: the first reply by another owner after the pause
		// began.
		stopAt := stop.At.Sub(d.Start).Nanoseconds()
		firstElsewhere := map[string]int64{}
		victimObjects := map[string]bool{}
		for _, o := range d.Ops {
			if o.Outcome != verify.OK || !o.Fence.Known() {
				continue
			}
			if o.Fence.Owner == victim && o.Fence.OwnerGeneration == gen {
				victimObjects[o.Object] = true
				continue
			}
			if at, ok := firstElsewhere[o.Object]; o.Return > stopAt && (!ok || o.Return < at) {
				firstElsewhere[o.Object] = o.Return
			}
		}
		stale, moved := 0, 0
		for obj := range victimObjects {
			at, ok := firstElsewhere[obj]
			if !ok {
				continue
			}
			moved++
			for _, o := range d.Ops {
				if o.Object == obj && o.Outcome == verify.OK && o.Fence.Owner == victim && o.Fence.OwnerGeneration == gen && o.Return > at {
					stale++
				}
			}
		}
		t.Logf("%d objects served by %s@%d before the pause; %d served elsewhere after it; %d of its replies accepted after that; %d executions after SIGCONT",
			len(victimObjects), victim, gen, moved, stale, after)
		if moved == 0 {
			t.Errorf("no object of the paused owner was served elsewhere")
		}
		if stale > 0 {
			t.Errorf("%d replies of the paused owner accepted after another owner served the object", stale)
		}
	}
	run(t, s)
	if !checked {
		t.Error("the run did not reach its checks")
	}
}
