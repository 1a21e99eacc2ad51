package node_test

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"testing"

	"github.com/meshloc/meshloc/pkg/client"
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
		if f := os.Getenv("MESHLOC_IDLE_HEAPPROFILE"); f != "" {
			out, err := os.Create(f)
			if err != nil {
				b.Fatal(err)
			}
			_ = pprof.Lookup("heap").WriteTo(out, 0)
			out.Close()
		}
	}
}

func liveHeap() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
