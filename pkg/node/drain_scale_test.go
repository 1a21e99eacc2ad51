package node_test

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
)

// activate makes count counters named prefix0..prefix<count-1> live with
// one add each, 64 calls in flight, and returns their names.
func activate(t testing.TB, c *client.Client, prefix string, count int) []string {
	t.Helper()
	names := make([]string, count)
	for i := range names {
		names[i] = prefix + strconv.Itoa(i)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= count {
					return
				}
				if _, err := c.Call(context.Background(), names[i], "add", strconv.Itoa(i+1)); err != nil {
					errs <- fmt.Errorf("%s: %w", names[i], err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	return names
}

// BenchmarkDrainIdle drains a node holding MESHLOC_DRAIN_OBJECTS (default
// 20,000) idle counters to two others with the default options, and
// reports objects moved per second. The work does not scale with b.N:
//
//	go test -run '^$' -bench BenchmarkDrainIdle -benchtime=1x ./pkg/node/
func BenchmarkDrainIdle(b *testing.B) {
	count := 20_000
	if s := os.Getenv("MESHLOC_DRAIN_OBJECTS"); s != "" {
		count, _ = strconv.Atoi(s)
	}
	for range b.N {
		m := startMesh(b, 1)
		c := newClient(b, client.Config{Etcd: m.etcd})
		t0 := time.Now()
		activate(b, c, "actor/counter/d", count)
		act := time.Since(t0)
		m.add(b, "n2")
		m.add(b, "n3")
		b.ResetTimer()
		stop := profileTo(b, os.Getenv("MESHLOC_DRAIN_PROFILE"))
		writeAllocs(b, os.Getenv("MESHLOC_DRAIN_MEMPROFILE"), ".base")
		cpu0, etcd0 := processCPU(), etcdWork(b)
		rep, err := m.nodes[0].Drain(context.Background(), node.DrainOptions{Concurrency: drainConc(b)})
		cpu, etcd := processCPU()-cpu0, etcdWork(b).less(etcd0)
		stop()
		writeAllocs(b, os.Getenv("MESHLOC_DRAIN_MEMPROFILE"), "")
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(len(rep.Moved))/rep.Duration.Seconds(), "objects/s")
		b.ReportMetric(float64(len(rep.Failed)), "failed")
		b.ReportMetric(float64(cpu.Microseconds())/float64(max(1, len(rep.Moved))), "cpu-µs/object")
		b.ReportMetric(float64(count)/act.Seconds(), "activations/s")
		// What etcd wrote and answered, unlike CPU and time, does not
		// depend on what else the machine runs.
		moved := float64(max(1, len(rep.Moved)))
		b.ReportMetric(etcd.walBytes/moved, "wal-B/object")
		b.ReportMetric(etcd.txns/moved*1000, "txns/1k-objects")
		b.Logf("moved %d failed %d in %v (%s; %d bulk moves); activated %d in %v", len(rep.Moved), len(rep.Failed), rep.Duration, rep.EndedEarly, rep.Bulks, count, act)
	}
}

// etcdCount is what the process's etcd members counted so far: bytes
// written to their WALs and Txn requests answered.
type etcdCount struct{ walBytes, txns float64 }

func etcdWork(b *testing.B) etcdCount {
	return etcdCount{walBytes: gatherSum(b, prometheus.DefaultGatherer, "etcd_disk_wal_write_bytes_total", nil),
		txns: gatherSum(b, prometheus.DefaultGatherer, "grpc_server_handled_total", map[string]string{"grpc_method": "Txn"})}
}

func (c etcdCount) less(o etcdCount) etcdCount {
	return etcdCount{walBytes: c.walBytes - o.walBytes, txns: c.txns - o.txns}
}

// writeAllocs writes the allocation profile so far to file+suffix (nothing
// when file is ""): the drain's own allocations are the profile written
// after it less the one written before it (go tool pprof -base).
func writeAllocs(b *testing.B, file, suffix string) {
	if file == "" {
		return
	}
	out, err := os.Create(file + suffix)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	if err := pprof.Lookup("allocs").WriteTo(out, 0); err != nil {
		b.Fatal(err)
	}
}

// drainConc is MESHLOC_DRAIN_CONCURRENCY (0: the node's default).
func drainConc(b *testing.B) int {
	c, _ := strconv.Atoi(os.Getenv("MESHLOC_DRAIN_CONCURRENCY"))
	return c
}

// profileTo writes a CPU profile to file until the returned stop is called
// (nothing when file is "").
func profileTo(b *testing.B, file string) (stop func()) {
	if file == "" {
		return func() {}
	}
	f, err := os.Create(file)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// processCPU is this process's user and system CPU time so far: the
// drain's cost, which a loaded machine's wall clock does not show.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
