package hostile_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/chaos"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Stages that sent their whole payload and were then refused, 500 of them,
// leave nothing behind: the target's live heap (what survived its last
// garbage collection, from its own metrics) grows by less than a tenth of
// what was sent. Kept stages would hold half a GiB (they did: a tombstone's
// answer frame sliced its stage's machine). The bound is on the growth, not
// a ratio to the baseline: the heap is read as of the node's last
// collection, which may have come mid-stage with a few MiB of one stage's
// chunks live, and a baseline of 3 MiB made that noise look like a leak.
func TestRefusedStagesFreeTheirBytes(t *testing.T) {
	c := cluster(t, 2, chaos.Config{})
	cl := newClient(t, c)
	const obj = "actor/counter/m1"
	add(t, cl, obj, 1)
	src, dst := ownerOf(t, c, obj)
	cc := dial(t, owners(t, c)[dst].Address)
	http := c.Node(dst).HTTP
	// A 1 MiB state the counter type refuses (an unknown field), found
	// only once all of it arrived.
	big := append([]byte(`{"v":1,"value":1,"pad":"`), bytes.Repeat([]byte("x"), 1<<20)...)
	big = append(big, `"}`...)
	stage := func(corrupt bool) {
		f := newForgery(t, c, src, dst, obj)
		f.selfIntent = true
		f.states[obj] = big
		f.chunk = 256 << 10
		p, chunks := f.prepare(t)
		if corrupt {
			last := chunks[len(chunks)-1]
			*last.Crc32C++
		}
		s := openStream(t, cc)
		s.send(t, prepareFrame(p))
		for _, ch := range chunks {
			s.send(t, chunkFrame(ch))
		}
		// The target takes every byte, then refuses: a chunk that does not
		// match its checksum, or a state the type cannot restore.
		if fr := s.recv(10 * time.Second); failedCode(fr) != pb.Code_CODE_DATA_LOST {
			t.Fatalf("want FAILED data_lost, got %v", fr)
		}
		s.cancel()
	}
	// The baseline: after 50 stages, so what is allocated once (pools,
	// connection buffers) counts in it, and so the last collection, like
	// the one after the 500, came mid-stage (the node idles between
	// readings: the figure is as of its last collection).
	for i := range 50 {
		stage(i%2 == 0)
	}
	base := liveHeap(t, http, 5)
	const rounds = 500
	for i := range rounds {
		stage(i%2 == 0)
	}
	after := liveHeap(t, http, 5)
	sent := float64(rounds * len(big))
	t.Logf("target live heap: %.1f MiB after 50 refused stages, %.1f MiB after %d more (%.0f MiB sent)", base/(1<<20), after/(1<<20), rounds, sent/(1<<20))
	if grew := after - base; grew > sent/10 {
		t.Fatalf("live heap grew %.1f MiB over %d refused stages, more than a tenth of the %.0f MiB sent", grew/(1<<20), rounds, sent/(1<<20))
	}
	if v, by := value(t, cl, obj); v != 1 || by != src {
		t.Fatalf("%s = %d by %s, want 1 by %s", obj, v, by, src)
	}
}

// liveHeap is the smallest of n readings of the node's live heap (as of
// its last garbage collection), a second apart: a reading taken just after
// a collection that ran mid-stage counts that stage's bytes.
func liveHeap(t *testing.T, httpAddr string, n int) float64 {
	t.Helper()
	low := 0.0
	for i := range n {
		v := metric(t, httpAddr, "go_gc_heap_live_bytes")
		if v <= 0 {
			t.Fatal(fmt.Errorf("go_gc_heap_live_bytes: %v", v))
		}
		if i == 0 || v < low {
			low = v
		}
		time.Sleep(time.Second)
	}
	return low
}
