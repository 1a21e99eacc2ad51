package node_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
)

// BenchmarkIdleCounters measures the memory target of the issue: 100,000
// idle counter objects on one node in ≤ 512 MiB RSS. It activates the objects
// once (the work does not scale with b.N), so run it with one iteration:
//
//	go test -run '^$' -bench BenchmarkIdleCounters -benchtime=1x -timeout 30m ./pkg/node/
//
// MESHLOC_IDLE_OBJECTS overrides the object count (a quick check: 2000);
// MESHLOC_HEAP_PROFILE=file writes a heap profile taken after the
// activations (for go tool pprof -top -sample_index=inuse_space): the
// -memprofile of go test is written after the cleanups, when the node is gone.
//
// The process holds the embedded etcd and the client as well as the node, so
// heap-MiB and rss-MiB bound the node's share from above. node-heap-MiB is the
// growth of the heap across the activations: the node's objects, its
// location cache and de-duplication tables, but also the client's location
// cache and etcd's index of the new keys. The reply de-duplication entries of
// the activating calls are still inside their window (DedupWindow, 60 s)
// when the heap is measured.
func BenchmarkIdleCounters(b *testing.B) {
	objects := envCount(b, "MESHLOC_IDLE_OBJECTS", 100_000)
	const workers = 64
	// MESHLOC_DEDUP_WINDOW (e.g. 1s): the node's de-duplication window; the
	// heap is then measured after two windows, once the node's sweep has
	// pruned the replies of the activating calls (the idle, settled state).
	var window time.Duration
	if s := os.Getenv("MESHLOC_DEDUP_WINDOW"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < time.Second {
			b.Fatalf("MESHLOC_DEDUP_WINDOW=%q: want a duration of 1s or more", s)
		}
		window = d
	}
	m := startMesh(b, 1, func(_ int, c *node.Config) {
		c.LeaseTTL = 5 * time.Second
		if window > 0 {
			c.DedupWindow = window
		}
	})
	c := newClient(b, client.Config{Etcd: m.etcd})
	ctx := context.Background()
	// Warm the connections and code paths so the baseline holds them.
	if _, err := c.Call(ctx, "actor/counter/warmup", "add", "1"); err != nil {
		b.Fatal(err)
	}
	before := settledHeap()

	var elapsed time.Duration
	round := 0
	for b.Loop() {
		// Later rounds (only if -benchtime asks for them) call the same
		// objects again: they are hosted already, so memory does not grow.
		round++
		start := time.Now()
		var next atomic.Int64
		var failed atomic.Int64
		var firstErr error
		var once sync.Once
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= int64(objects) {
						return
					}
					if _, err := c.Call(ctx, fmt.Sprintf("actor/counter/m%d", i), "add", "1"); err != nil {
						failed.Add(1)
						once.Do(func() { firstErr = err })
					}
				}
			})
		}
		wg.Wait()
		if round == 1 {
			elapsed = time.Since(start)
		}
		if n := failed.Load(); n > 0 {
			b.Fatalf("%d of %d calls failed; first: %v", n, objects, firstErr)
		}
	}
	b.StopTimer()

	if got := m.nodes[0].Hosted(); got != objects+1 {
		b.Fatalf("node hosts %d objects, want %d", got, objects+1)
	}
	if window > 0 {
		time.Sleep(2*window + time.Second)
	}
	after := settledHeap()
	rss, err := vmRSS()
	if err != nil {
		b.Fatal(err)
	}
	if path := os.Getenv("MESHLOC_HEAP_PROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	const mib = 1 << 20
	b.ReportMetric(float64(after.HeapInuse)/mib, "heap-MiB")
	b.ReportMetric(float64(rss)/mib, "rss-MiB")
	b.ReportMetric((float64(after.HeapInuse)-float64(before.HeapInuse))/mib, "node-heap-MiB")
	b.ReportMetric((float64(after.HeapInuse)-float64(before.HeapInuse))/float64(objects), "heap-B/object")
	b.ReportMetric(float64(objects)/elapsed.Seconds(), "objects/s")
	b.Logf("%d objects in %v; heap in use %d → %d MiB (%d live objects → %d); goroutines %d; RSS %d MiB",
		objects, elapsed.Round(time.Millisecond), before.HeapInuse/mib, after.HeapInuse/mib,
		before.HeapObjects, after.HeapObjects, runtime.NumGoroutine(), rss/mib)
}

// settledHeap collects garbage, returns freed pages to the OS and reads the
// heap statistics.
func settledHeap() runtime.MemStats {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms
}

// vmRSS is the resident set size of this process in bytes (Linux).
func vmRSS() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("rss: %w", err)
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		f := bytes.Fields(s.Bytes())
		if len(f) == 3 && string(f[0]) == "VmRSS:" && string(f[2]) == "kB" {
			kb, err := strconv.ParseUint(string(f[1]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("rss: %q: %w", s.Text(), err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("rss: no VmRSS line in /proc/self/status")
}
