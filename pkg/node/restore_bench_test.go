package node_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
)

// BenchmarkStartWithDurableObjects measures issue 18's scale target: a
// node that starts while 100,000 durable objects wait to be restored (their
// owner died: their records name it, their state is in etcd) is serving
// within 10 s. It writes the objects through a first node (64 callers),
// stops that node (its lease goes: every object is orphaned), then starts
// a second node and reports how long its Start took (start-s: the location
// cache and the owner directory loaded, every record read), how long the
// first call to an orphaned object took (first-call-ms: recovered on the
// new node and its state read back from etcd), and the p50 of 1,000 more
// such first calls (restore-p50-ms). The work does not scale with b.N: run
// it with one iteration.
//
//	go test -run '^$' -bench BenchmarkStartWithDurableObjects -benchtime=1x -timeout 30m ./pkg/node/
//
// MESHLOC_DURABLE_OBJECTS overrides the count (a quick check: 2000).
func BenchmarkStartWithDurableObjects(b *testing.B) {
	objects := envCount(b, "MESHLOC_DURABLE_OBJECTS", 100_000)
	m := startMesh(b, 1, func(_ int, c *node.Config) { c.LeaseTTL = 5 * time.Second })
	ctx := context.Background()
	c := newClient(b, client.Config{Etcd: m.etcd})
	name := func(i int) string { return fmt.Sprintf("actor/dcounter/r%d", i) }
	t0 := time.Now()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(objects); i = next.Add(1) - 1 {
				if _, err := c.Call(ctx, name(int(i)), "add", "1"); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d writes failed", n, objects)
	}
	b.Logf("%d durable objects written in %v", objects, time.Since(t0).Round(time.Millisecond))
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if err := m.nodes[0].Stop(sctx); err != nil {
		b.Fatal(err)
	}
	cancel()

	for b.Loop() {
		start := time.Now()
		n := m.add(b, fmt.Sprintf("s%d", len(m.nodes)+1), func(_ int, c *node.Config) { c.LeaseTTL = 5 * time.Second })
		started := time.Since(start)
		fresh := newClient(b, client.Config{Nodes: []string{n.Address()}})
		call := func(i int) time.Duration {
			t := time.Now()
			r, err := fresh.Call(ctx, name(i), "get")
			if err != nil || string(r.Payload) == "" {
				b.Fatalf("first call to %s on the new node: %v", name(i), err)
			}
			return time.Since(t)
		}
		first := call(0)
		var lat []time.Duration
		for range 1000 {
			lat = append(lat, call(1+rand.IntN(objects-1)))
		}
		b.ReportMetric(started.Seconds(), "start-s")
		b.ReportMetric(float64(first.Microseconds())/1000, "first-call-ms")
		b.ReportMetric(float64(median(lat).Microseconds())/1000, "restore-p50-ms")
		b.ReportMetric(float64(objects), "objects")
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// envCount is the positive count the environment variable name holds, or
// def when it is unset.
func envCount(b *testing.B, name string, def int) int {
	b.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive count", name, s)
	}
	return n
}
