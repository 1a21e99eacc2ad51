package node_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// slowRunQueue is a run-queue wait histogram whose every reading adds 100
// waits of up to 10 ms: a process whose calls wait for a processor.
func slowRunQueue() func() *metrics.Float64Histogram {
	var reads atomic.Uint64
	return func() *metrics.Float64Histogram {
		n := reads.Add(1) * 100
		return &metrics.Float64Histogram{Buckets: []float64{0, 1e-3, 10e-3, math.Inf(1)}, Counts: []uint64{0, 0, n}}
	}
}

// storeVersion is the store version of name's record in etcd.
func storeVersion(t *testing.T, m *mesh, name string) int64 {
	t.Helper()
	obj, _ := keyspace.ParseObject(name)
	snap, err := authority.New(m.etcd, keyspace.Default()).Read(context.Background(), obj)
	if err != nil {
		t.Fatal(err)
	}
	return snap.StoreVersion
}

// gather creates names (counters) and moves each to on, in the foreground.
func gather(t *testing.T, m *mesh, c *client.Client, on *node.Node, names ...string) {
	t.Helper()
	ctx := context.Background()
	for _, name := range names {
		if _, err := c.Call(ctx, name, "add", "1"); err != nil {
			t.Fatal(err)
		}
		if o := m.owner(t, name); o != on {
			if st, err := o.Relocate(ctx, name, node.RelocateOptions{Target: on.Self().ID, Foreground: true}); err != nil || st.GetOutcome() != "completed" {
				t.Fatalf("gathering %s on %s: %+v %v", name, on.Self().ID, st, err)
			}
		}
	}
}

// slowCalls keeps calling name, and makes n's process look slow, until
// the test ends or it calls the stop returned; it returns when n paces its
// background relocations.
func slowCalls(t *testing.T, c *client.Client, n *node.Node, name string) (stopCalls func()) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	stopCalls = func() { stop(); wg.Wait() }
	t.Cleanup(stopCalls)
	wg.Go(func() {
		for ctx.Err() == nil {
			_, _ = c.Call(ctx, name, "add", "1")
		}
	})
	node.SetRunQueue(n, slowRunQueue())
	waitFor(t, 10*time.Second, "background relocations slowed", func() bool { return !math.IsInf(n.BackgroundRate(), 1) })
	return stopCalls
}

// pacedMesh is two nodes that pace background relocations down to 0.01
// units/s (once slowed, one small relocation per 100 s), and four counters
// prefix0..3 on the first, src, whose process looks slow while calls to
// the first counter keep coming (until stopCalls or the test's end).
func pacedMesh(t *testing.T, prefix string) (m *mesh, c *client.Client, src *node.Node, names []string, stopCalls func()) {
	t.Helper()
	m = startMesh(t, 2, func(_ int, c *node.Config) {
		c.BackgroundLatencyTarget, c.BackgroundMinRate, c.RelocationTimeout = 250*time.Microsecond, 0.01, time.Minute
	})
	c = newClient(t, client.Config{Etcd: m.etcd})
	for i := range 4 {
		names = append(names, fmt.Sprint(prefix, i))
	}
	src = m.nodes[0]
	// The other node looks idle whatever the machine's load: these tests
	// pace src, and a target pacing by a busy test machine's run queue
	// would defer their relocations instead.
	node.SetRunQueue(m.nodes[1], func() *metrics.Float64Histogram { return nil })
	gather(t, m, c, src, names...)
	return m, c, src, names, slowCalls(t, c, src, names[0])
}

// While a node's calls are slow, its background relocations start at its
// minimum rate: one goes, the next waits, and one that would wait longer
// than half its timeout is deferred with nothing done; a foreground
// relocation starts at once; a drain starts the waiting ones at once.
func TestBackgroundRelocationsPaced(t *testing.T) {
	m, c, src, names, _ := pacedMesh(t, "actor/counter/p")
	ctx := context.Background()
	if r := src.BackgroundRate(); r != 0.01 {
		t.Fatalf("slowed to %v units/s, want the minimum 0.01", r)
	}

	// The first goes at once (the pacer's burst of one).
	if st, err := src.Relocate(ctx, names[1], node.RelocateOptions{}); err != nil || st.GetOutcome() != "completed" {
		t.Fatalf("first background relocation: %+v %v", st, err)
	}
	// The next would wait 100 s: deferred after half its timeout, with
	// nothing done.
	before := storeVersion(t, m, names[2])
	_, err := src.Relocate(ctx, names[2], node.RelocateOptions{Timeout: 2 * time.Second})
	if !errors.Is(err, node.ErrRelocationDeferred) || wire.CodeOf(err) != pb.Code_CODE_RESOURCE_EXHAUSTED {
		t.Fatalf("second background relocation: %v, want deferred (resource_exhausted)", err)
	}
	if after := storeVersion(t, m, names[2]); after != before || m.owner(t, names[2]) != src {
		t.Fatalf("a deferred relocation changed %s: store version %d → %d", names[2], before, after)
	}
	if got := m.metric(t, src, "meshloc_background_relocations_deferred_total"); got != 1 {
		t.Fatalf("deferred counted %v times, want 1", got)
	}
	if _, err := c.Call(ctx, names[2], "add", "1"); err != nil {
		t.Fatalf("%s after its deferred relocation: %v", names[2], err)
	}
	// Foreground: at once.
	if st, err := src.Relocate(ctx, names[2], node.RelocateOptions{Foreground: true}); err != nil || st.GetOutcome() != "completed" {
		t.Fatalf("foreground relocation while slowed: %+v %v", st, err)
	}

	// A background relocation waits; a drain starts it at once (else it
	// would be deferred after 20 s).
	done := make(chan error, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		_, err := src.Relocate(ctx, names[3], node.RelocateOptions{Timeout: 40 * time.Second})
		done <- err
	})
	waitFor(t, 10*time.Second, "a background relocation waiting", func() bool {
		select {
		case err := <-done:
			t.Fatalf("the third background relocation did not wait: %v", err)
		default:
		}
		return m.metric(t, src, "meshloc_background_relocations_waiting") == 1
	})
	if _, err := src.Drain(ctx, node.DrainOptions{}); err != nil {
		t.Fatalf("drain: %v", err)
	}
	select {
	case err := <-done:
		// It started: it moved the object, or found the drain had (or was
		// moving it) first. Never deferred.
		if errors.Is(err, node.ErrRelocationDeferred) {
			t.Fatalf("a waiting background relocation was deferred during a drain: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a waiting background relocation did not end after the drain")
	}
	if got := m.metric(t, src, "meshloc_background_relocations_waiting"); got != 0 {
		t.Fatalf("%v still waiting", got)
	}
}

// A background relocation the node's pacing holds back is listed while it
// waits, in the phase "pacing": a detached one is answered at once and,
// deferred, ends aborted (resource_exhausted) with nothing done; one that is
// admitted goes on under the same id, its timeline starting with pacing.
func TestPacedRelocationListed(t *testing.T) {
	m, _, src, names, stopCalls := pacedMesh(t, "actor/counter/w")
	ctx := context.Background()
	listed := func(id []byte) *pb.RelocationStatus {
		for _, r := range src.Relocations() {
			if bytes.Equal(r.GetRelocationId(), id) && r.GetRole() == "source" {
				return r
			}
		}
		return nil
	}
	steps := func(st *pb.RelocationStatus) []string {
		var out []string
		for _, m := range st.GetTimeline() {
			out = append(out, m.GetStep())
		}
		return out
	}

	// The pacer's burst of one: started at once, no pacing step.
	st, err := src.Relocate(ctx, names[1], node.RelocateOptions{})
	if err != nil || st.GetOutcome() != "completed" || steps(st)[0] != "intent" {
		t.Fatalf("first background relocation: %+v %v", st, err)
	}

	// Detached: answered at once, waiting; deferred after half its timeout.
	before := storeVersion(t, m, names[2])
	st, err = src.Relocate(ctx, names[2], node.RelocateOptions{Timeout: 2 * time.Second, Detach: true})
	if err != nil || st.GetPhase() != "pacing" || st.GetOutcome() != "" || len(st.GetRelocationId()) == 0 {
		t.Fatalf("a detached background relocation while paced: %+v %v, want it answered waiting", st, err)
	}
	id := st.GetRelocationId()
	if r := listed(id); r == nil || (r.GetOutcome() == "" && r.GetPhase() != "pacing") {
		t.Fatalf("the waiting relocation is listed as %+v", r)
	}
	waitFor(t, 10*time.Second, "the detached relocation deferred", func() bool { return listed(id).GetOutcome() != "" })
	r := listed(id)
	if r.GetOutcome() != "aborted" || r.GetCode() != pb.Code_CODE_RESOURCE_EXHAUSTED || !strings.Contains(r.GetMessage(), "half its timeout") ||
		!slices.Equal(steps(r), []string{"pacing", "done"}) || r.GetEndedUnixMs() == 0 {
		t.Fatalf("the deferred relocation ended as %+v", r)
	}
	if after := storeVersion(t, m, names[2]); after != before || m.owner(t, names[2]) != src {
		t.Fatalf("a deferred relocation changed %s: store version %d → %d", names[2], before, after)
	}

	// Waiting, listed; admitted once the calls stop; the same relocation.
	type result struct {
		st  *pb.RelocationStatus
		err error
	}
	done := make(chan result, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		st, err := src.Relocate(ctx, names[3], node.RelocateOptions{Timeout: 40 * time.Second})
		done <- result{st, err}
	})
	waitFor(t, 10*time.Second, "the waiting relocation listed", func() bool {
		for _, r := range src.Relocations() {
			if r.GetObject() == names[3] && r.GetPhase() == "pacing" && r.GetOutcome() == "" {
				id = r.GetRelocationId()
				return true
			}
		}
		return false
	})
	stopCalls() // no calls: the node starts background work at once
	select {
	case res := <-done:
		if res.err != nil || res.st.GetOutcome() != "completed" || !bytes.Equal(res.st.GetRelocationId(), id) {
			t.Fatalf("the admitted relocation: %+v %v, want completed under id %x", res.st, res.err, id)
		}
		if s := steps(res.st); len(s) < 3 || s[0] != "pacing" || s[1] != "intent" || s[len(s)-1] != "done" {
			t.Fatalf("its timeline: %v", s)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting relocation did not end once the calls stopped")
	}
	if m.owner(t, names[3]) == src {
		t.Fatalf("%s did not move", names[3])
	}
}

// A target whose calls are slow paces the background relocations sent to
// it: the first, from a source that did not know, is booked and tells the
// source; the next waits for the target's admission before its intent and,
// not admitted in a quarter of its timeout, ends aborted with nothing done;
// a foreground one goes at once.
func TestTargetPacesIncomingBackgroundRelocations(t *testing.T) {
	m := startMesh(t, 2, func(_ int, c *node.Config) {
		c.BackgroundLatencyTarget, c.BackgroundMinRate = 250*time.Microsecond, 0.01
	})
	c := newClient(t, client.Config{Etcd: m.etcd})
	ctx := context.Background()
	names := []string{"actor/counter/t0", "actor/counter/t1", "actor/counter/t2"}
	src, dst := m.nodes[0], m.nodes[1]
	gather(t, m, c, dst, names[0])
	gather(t, m, c, src, names[1:]...)
	// dst serves calls, and its run queue looks slow; src serves none.
	slowCalls(t, c, dst, names[0])

	to := node.RelocateOptions{Target: dst.Self().ID}
	if st, err := src.Relocate(ctx, names[1], to); err != nil || st.GetOutcome() != "completed" {
		t.Fatalf("first background relocation to a pacing target: %+v %v", st, err)
	}
	before := storeVersion(t, m, names[2])
	to.Timeout = 4 * time.Second
	st, err := src.Relocate(ctx, names[2], to)
	if err != nil || st.GetOutcome() != "aborted" || st.GetCode() != pb.Code_CODE_RESOURCE_EXHAUSTED {
		t.Fatalf("second background relocation to a pacing target: %+v %v, want aborted resource_exhausted", st, err)
	}
	if after := storeVersion(t, m, names[2]); after != before || m.owner(t, names[2]) != src {
		t.Fatalf("a relocation the target did not admit changed %s: store version %d → %d", names[2], before, after)
	}
	if _, err := c.Call(ctx, names[2], "add", "1"); err != nil {
		t.Fatalf("%s after its relocation was not admitted: %v", names[2], err)
	}
	waitFor(t, 10*time.Second, "the target's wait given up", func() bool {
		return m.metric(t, dst, "meshloc_background_relocations_waiting") == 0
	})
	to.Foreground = true
	if st, err := src.Relocate(ctx, names[2], to); err != nil || st.GetOutcome() != "completed" {
		t.Fatalf("foreground relocation to a pacing target: %+v %v", st, err)
	}
}
