package drain

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The drain's decisions on an in-memory node: what goes in bulk moves,
// what alone, where, what is tried again, and what the report says. The
// node's own drain tests (pkg/node) run it against real relocations.

type fakeObj struct {
	name  string
	obj   keyspace.Object
	bytes int
}

func (o *fakeObj) Name() string            { return o.name }
func (o *fakeObj) Object() keyspace.Object { return o.obj }
func (o *fakeObj) Verdict() Verdict        { return Now }
func (o *fakeObj) StateBytes() int         { return o.bytes }

// fakeHost hosts objects and moves them as told: a bulk move to an owner
// in abortOn aborts (the source keeps its objects).
type fakeHost struct {
	mu      sync.Mutex
	objs    map[string]*fakeObj
	owners  []lease.Owner
	count   map[string]int
	abortOn map[string]bool
	bulks   [][]string // names per bulk move, in order
	alone   []string   // names moved on their own
	stop    chan struct{}
}

func newFakeHost(n int, owners ...string) *fakeHost {
	h := &fakeHost{objs: map[string]*fakeObj{}, count: map[string]int{}, abortOn: map[string]bool{}, stop: make(chan struct{})}
	for i := range n {
		o := keyspace.Actor("counter", fmt.Sprintf("c%05d", i))
		h.objs[o.String()] = &fakeObj{name: o.String(), obj: o}
	}
	for i, id := range owners {
		h.owners = append(h.owners, lease.Owner{Descriptor: lease.Descriptor{OwnerID: id, Weight: 1, State: lease.StateServing}, Generation: int64(10 + i)})
	}
	return h
}

func (h *fakeHost) Hosted() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.objs)
}

func (h *fakeHost) Undone(done map[Hosted]bool) []Hosted {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Hosted
	for _, o := range h.objs {
		if !done[o] {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b Hosted) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}

func (h *fakeHost) Current(name string) Hosted {
	h.mu.Lock()
	defer h.mu.Unlock()
	if o := h.objs[name]; o != nil {
		return o
	}
	return nil
}

func (h *fakeHost) IsHosted(name string) bool { return h.Current(name) != nil }

func (h *fakeHost) HostedChanged() <-chan struct{}    { return nil } // the backstop wakes the loop
func (h *fakeHost) DirectoryChanged() <-chan struct{} { return nil }
func (h *fakeHost) Stopping() <-chan struct{}         { return h.stop }
func (h *fakeHost) TargetStages() int                 { return 0 }
func (h *fakeHost) Step() error                       { return nil }

func (h *fakeHost) Targets(string) ([]lease.Owner, error) { return slices.Clone(h.owners), nil }
func (h *fakeHost) Takes(lease.Owner, string) bool        { return true }

func (h *fakeHost) Count(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count[id]
}

func (h *fakeHost) MoveOne(_ context.Context, name, target string, _ time.Duration) MoveResult {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.alone = append(h.alone, name)
	delete(h.objs, name)
	h.count[target]++
	return MoveResult{Status: &pb.RelocationStatus{Outcome: "completed", RelocationId: make([]byte, 16)}}
}

func (h *fakeHost) MoveBulk(_ context.Context, names []string, target lease.Owner, _ time.Duration) []BulkResult {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bulks = append(h.bulks, slices.Clone(names))
	out := make([]BulkResult, len(names))
	for i, name := range names {
		out[i] = BulkResult{Object: name, Outcome: "completed"}
		if h.abortOn[target.Descriptor.OwnerID] {
			out[i].Outcome, out[i].Code, out[i].Message = "aborted", pb.Code_CODE_CONFLICT, "target busy"
			continue
		}
		delete(h.objs, name)
		h.count[target.Descriptor.OwnerID]++
	}
	return out
}

func params() Params {
	return Params{Owner: "n1@1", Concurrency: 512, Timeout: time.Minute, Attempts: DefaultAttempts, RelocationTimeout: 10 * time.Second,
		Clock: clock.Real(), Log: zerolog.Nop(), Outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"outcome"})}
}

// Idle actors go in full bulk moves, spread evenly over the targets; a
// large state goes on its own; every object is reported moved once.
func TestDrainBulksAndSpreads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(1000, "n2", "n3")
		big := h.objs[keyspace.Actor("counter", "c00007").String()]
		big.bytes = 4 << 20
		rep := Execute(t.Context(), h, params(), NewRun())
		if len(rep.Moved) != 1000 || len(rep.Failed) != 0 || rep.EndedEarly != "" || h.Hosted() != 0 {
			t.Fatalf("moved %d failed %d ended early %q, %d left", len(rep.Moved), len(rep.Failed), rep.EndedEarly, h.Hosted())
		}
		if len(h.alone) != 1 || h.alone[0] != big.name {
			t.Fatalf("moved alone: %v, want only the large state", h.alone)
		}
		// Each object is in one bulk move: a batch the dispatcher put back
		// for the next slots once went back twice when its target had a
		// full bulk started in the same pass.
		in := map[string]int{}
		for i, b := range h.bulks {
			if len(b) > MaxBulk {
				t.Fatalf("a bulk of %d objects (at most %d)", len(b), MaxBulk)
			}
			for _, name := range b {
				if j, ok := in[name]; ok {
					t.Fatalf("%s in bulk moves %d and %d", name, j, i)
				}
				in[name] = i
			}
		}
		if rep.Bulks != len(h.bulks) || len(h.bulks) < 999/MaxBulk {
			t.Fatalf("%d bulks reported, %d run", rep.Bulks, len(h.bulks))
		}
		// Least loaded first, per bulk: neither target is more than two
		// bulks ahead (the last, partial bulks land where they may).
		if d := h.count["n2"] - h.count["n3"]; d > 2*MaxBulk || d < -2*MaxBulk {
			t.Fatalf("spread n2 %d, n3 %d", h.count["n2"], h.count["n3"])
		}
	})
}

// A bulk move that aborts leaves its objects where they were: they are
// tried again on the other target, and reported moved there.
func TestDrainRetriesElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(300, "n2", "n3")
		h.abortOn["n2"] = true
		var mu sync.Mutex
		retries := 0
		run := NewRun()
		run.Subscribe(func(ev Event) {
			mu.Lock()
			defer mu.Unlock()
			if ev.Kind == Retry {
				retries++
			}
		})
		rep := Execute(t.Context(), h, params(), run)
		if len(rep.Moved) != 300 || len(rep.Failed) != 0 || h.count["n3"] != 300 {
			t.Fatalf("moved %d failed %d, n3 took %d", len(rep.Moved), len(rep.Failed), h.count["n3"])
		}
		for _, m := range rep.Moved {
			if !strings.HasPrefix(m.Target, "n3@") {
				t.Fatalf("%s reported moved to %s", m.Object, m.Target)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if retries == 0 {
			t.Fatal("no retry event for the aborted bulk moves")
		}
	})
}

// When every target aborts, each object is tried Attempts times and then
// reported failed with the last reason; the drain ends.
func TestDrainGivesUpAfterAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(50, "n2", "n3")
		h.abortOn["n2"], h.abortOn["n3"] = true, true
		rep := Execute(t.Context(), h, params(), NewRun())
		if len(rep.Moved) != 0 || len(rep.Failed) != 50 {
			t.Fatalf("moved %d failed %d", len(rep.Moved), len(rep.Failed))
		}
		for _, f := range rep.Failed {
			if f.Attempts != DefaultAttempts || f.Code != pb.Code_CODE_CONFLICT || !strings.Contains(f.Reason, "target busy") {
				t.Fatalf("failure %+v", f)
			}
		}
	})
}

// A drain of a stopping node starts nothing and says why.
func TestDrainStopsWithTheNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(10, "n2")
		close(h.stop)
		rep := Execute(t.Context(), h, params(), NewRun())
		if len(rep.Moved) != 0 || len(rep.Failed) != 10 || rep.EndedEarly != "the node is stopping" {
			t.Fatalf("moved %d failed %d ended early %q", len(rep.Moved), len(rep.Failed), rep.EndedEarly)
		}
	})
}

// Options out of range are refused with ErrInvalid.
func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{{Concurrency: -1}, {Concurrency: MaxConcurrency + 1}, {Timeout: -time.Second}, {Timeout: MaxTimeout + 1}, {Attempts: 101}} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if err := (Options{}).Validate(); err != nil {
		t.Fatal(err)
	}
}
