package node_test

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
)

// BenchmarkIdleMemory reports the live heap a node holds per idle memory
// counter (heap-B/object), MESHLOC_IDLE_OBJECTS of them (100,000 by
// default), made by first calls; MESHLOC_IDLE_HEAPPROFILE writes the heap
// profile then. The etcd server and the client share the process, so the
// profile is the way to tell the node's part (pkg/node, its cache); the
// scale bench's memory part measures a node process alone.
//
//	go test -run '^$' -bench BenchmarkIdleMemory -benchtime=1x ./pkg/node/
func BenchmarkIdleMemory(b *testing.B) {
	count := 100_000
	if v, err := strconv.Atoi(os.Getenv("MESHLOC_IDLE_OBJECTS")); err == nil && v > 0 {
		count = v
	}
	for range b.N {
		m := startMesh(b, 1)
		c := newClient(b, client.Config{Nodes: m.addrs()})
		before := liveHeap()
		activate(b, c, "actor/counter/i", count)
		after := liveHeap()
		b.ReportMetric(float64(after-before)/float64(count), "heap-B/object")
		writeHeapProfile(b)
	}
}

// writeHeapProfile writes the heap profile to MESHLOC_IDLE_HEAPPROFILE, if set.
func writeHeapProfile(b *testing.B) {
	if f := os.Getenv("MESHLOC_IDLE_HEAPPROFILE"); f != "" {
		out, err := os.Create(f)
		if err != nil {
			b.Fatal(err)
		}
		_ = pprof.Lookup("heap").WriteTo(out, 0)
		out.Close()
	}
}

func liveHeap() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkSleepingMemory reports the live heap a node keeps per durable
// object once it went to sleep (heap-B/object), MESHLOC_IDLE_OBJECTS of
// them; MESHLOC_IDLE_HEAPPROFILE writes the heap profile then.
//
//	go test -run '^$' -bench BenchmarkSleepingMemory -benchtime=1x ./pkg/node/
func BenchmarkSleepingMemory(b *testing.B) {
	count := 100_000
	if v, err := strconv.Atoi(os.Getenv("MESHLOC_IDLE_OBJECTS")); err == nil && v > 0 {
		count = v
	}
	for range b.N {
		m := startMesh(b, 0)
		m.types = sleepyTypes(b, time.Second)
		// A short window: the sweep that forgets sleeping objects' fences
		// runs once per window.
		n1 := m.add(b, "n1", func(_ int, c *node.Config) { c.DedupWindow = time.Second })
		c := newClient(b, client.Config{Nodes: m.addrs()})
		before := liveHeap()
		activate(b, c, "actor/sleepy/i", count)
		waitUntil(b, 10*time.Minute, "all asleep", func() error {
			if h := m.metric(b, n1, "meshloc_hosted_objects"); h != 0 {
				return fmt.Errorf("%v objects awake", h)
			}
			return nil
		})
		time.Sleep(3 * time.Second) // past a sweep of the fences
		after := liveHeap()
		b.ReportMetric(float64(after-before)/float64(count), "heap-B/object")
		writeHeapProfile(b)
	}
}
