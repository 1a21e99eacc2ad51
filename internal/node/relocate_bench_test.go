package node_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/node"
	"github.com/meshloc/meshloc/pkg/client"
)

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// casLatencies measures n serial single-key CAS transactions on etcd.
func casLatencies(b *testing.B, c *clientv3.Client, n int) []time.Duration {
	ctx := context.Background()
	key := "/bench/cas"
	resp, err := c.Put(ctx, key, "0")
	if err != nil {
		b.Fatal(err)
	}
	rev := resp.Header.Revision
	out := make([]time.Duration, 0, n)
	for i := range n {
		t0 := time.Now()
		tr, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, fmt.Sprint(i))).Commit()
		if err != nil || !tr.Succeeded {
			b.Fatal(err)
		}
		out = append(out, time.Since(t0))
		rev = tr.Header.Revision
	}
	return out
}

// casRate measures CAS transactions per second with clients in flight (each on its own key).
func casRate(b *testing.B, c *clientv3.Client, clients int, d time.Duration) float64 {
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	deadline := time.Now().Add(d)
	start := time.Now()
	for g := range clients {
		wg.Go(func() {
			key := fmt.Sprintf("/bench/rate/%d", g)
			resp, err := c.Put(ctx, key, "0")
			if err != nil {
				b.Error(err)
				return
			}
			rev, n := resp.Header.Revision, 0
			for time.Now().Before(deadline) {
				tr, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, "x")).Commit()
				if err != nil || !tr.Succeeded {
					b.Error(err)
					return
				}
				rev = tr.Header.Revision
				n++
			}
			mu.Lock()
			total += n
			mu.Unlock()
		})
	}
	wg.Wait()
	return float64(total) / time.Since(start).Seconds()
}

// BenchmarkRelocation measures, in one run beside its baselines: the
// interruption of a 1 KiB object against etcd single-key CAS latency, and
// relocations per second with 1, 8 and 64 in flight against etcd's CAS rate
// with 64 clients. Run: go test -run XXX -bench Relocation -benchtime 1x ./internal/node/
func BenchmarkRelocation(b *testing.B) {
	m := startMesh(b, 2)
	ctx := context.Background()
	c := newClient(b, client.Config{Etcd: m.etcd})
	value := strings.Repeat("v", 1024)

	b.Run("interruption-1KiB", func(b *testing.B) {
		if _, err := c.Call(ctx, "actor/register/bench", "put", value); err != nil {
			b.Fatal(err)
		}
		const moves = 300
		cas := casLatencies(b, m.etcd, moves)
		var intr []time.Duration
		for b.Loop() {
			for range moves {
				src := m.owner(b, "actor/register/bench")
				st, err := src.Relocate(ctx, "actor/register/bench", node.RelocateOptions{})
				if err != nil || st.GetOutcome() != "completed" {
					b.Fatalf("%v %v", err, st)
				}
				intr = append(intr, time.Duration(st.GetInterruptionUs())*time.Microsecond)
			}
		}
		p50, p99 := pct(intr, 50), pct(intr, 99)
		c50, c99 := pct(cas, 50), pct(cas, 99)
		b.ReportMetric(float64(p50.Microseconds()), "interrupt-p50-µs")
		b.ReportMetric(float64(p99.Microseconds()), "interrupt-p99-µs")
		b.ReportMetric(float64(c50.Microseconds()), "cas-p50-µs")
		b.ReportMetric(float64(c99.Microseconds()), "cas-p99-µs")
		b.ReportMetric(float64(p50)/float64(c50), "p50-ratio")
		b.ReportMetric(float64(p99)/float64(c99), "p99-ratio")
	})

	for _, inflight := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("relocations-per-sec-%d", inflight), func(b *testing.B) {
			names := make([]string, inflight)
			for i := range names {
				names[i] = fmt.Sprintf("actor/counter/rate-%d-%d", inflight, i)
				if _, err := c.Call(ctx, names[i], "add", "1"); err != nil {
					b.Fatal(err)
				}
			}
			var rate float64
			for b.Loop() {
				var wg sync.WaitGroup
				var mu sync.Mutex
				done := 0
				deadline := time.Now().Add(3 * time.Second)
				start := time.Now()
				for _, name := range names {
					wg.Go(func() {
						for time.Now().Before(deadline) {
							src := m.owner(b, name)
							st, err := src.Relocate(ctx, name, node.RelocateOptions{})
							if err != nil || st.GetOutcome() != "completed" {
								b.Errorf("%v %v", err, st)
								return
							}
							mu.Lock()
							done++
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				rate = float64(done) / time.Since(start).Seconds()
			}
			base := casRate(b, m.etcd, 64, 3*time.Second)
			b.ReportMetric(rate, "relocs/s")
			b.ReportMetric(base, "cas64/s")
			b.ReportMetric(rate/base, "ratio")
		})
	}
}

// rawTCP measures loopback TCP throughput with one connection: the streaming limit.
func rawTCP(b *testing.B, total int) float64 {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	done := make(chan int64, 1)
	go func() {
		cn, err := l.Accept()
		if err != nil {
			done <- 0
			return
		}
		n, _ := io.Copy(io.Discard, cn)
		cn.Close()
		done <- n
	}()
	cn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	start := time.Now()
	for sent := 0; sent < total; sent += len(buf) {
		if _, err := cn.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	cn.Close()
	<-done
	return float64(total) / time.Since(start).Seconds() / (1 << 30)
}

// BenchmarkStream256MiB relocates a 256 MiB blob and reports GiB/s (payload
// bytes over seal-to-admission time) beside raw loopback TCP in the same run.
func BenchmarkStream256MiB(b *testing.B) {
	m := startMesh(b, 2)
	ctx := context.Background()
	c := newClient(b, client.Config{Etcd: m.etcd, Timeout: time.Minute})
	if _, err := c.Call(ctx, "actor/blob/big", "fill", fmt.Sprint(256<<20)); err != nil {
		b.Fatal(err)
	}
	var gibs float64
	for b.Loop() {
		src := m.owner(b, "actor/blob/big")
		st, err := src.Relocate(ctx, "actor/blob/big", node.RelocateOptions{Timeout: time.Minute})
		if err != nil || st.GetOutcome() != "completed" {
			b.Fatalf("%v %v", err, st)
		}
		gibs = float64(st.GetPayloadBytes()) / (float64(st.GetInterruptionUs()) / 1e6) / (1 << 30)
	}
	raw := rawTCP(b, 256<<20)
	b.ReportMetric(gibs, "GiB/s")
	b.ReportMetric(raw, "tcp-GiB/s")
	b.ReportMetric(gibs/raw, "ratio")
}
