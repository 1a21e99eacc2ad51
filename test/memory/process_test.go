// Package memory measures the memory targets of meshloc on real processes.
// It has benchmarks only: go test runs nothing here unless -bench asks.
package memory

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/client"
)

// BenchmarkIdleCountersProcess is the memory target of the issue measured on
// a meshnode process alone: 100,000 idle counter objects on one node in
// ≤ 512 MiB RSS. etcd and the client run in the benchmark process, so the
// node's figures are its own (pkg/node's BenchmarkIdleCounters measures
// all three in one process). The work does not scale with b.N:
//
//	go test -run '^$' -bench BenchmarkIdleCountersProcess -benchtime=1x -timeout 30m ./test/memory/
//
// It reports the node's resident set after the activations (rss-MiB), its
// peak (peak-rss-MiB, VmHWM), and, after MESHLOC_SETTLE (default 130 s: the
// Go runtime collects at least every two minutes, and nothing else makes an
// idle node collect), its settled resident set and heap in use
// (settled-rss-MiB, settled-heap-MiB, from its /metrics). MESHLOC_IDLE_OBJECTS
// overrides the object count.
func BenchmarkIdleCountersProcess(b *testing.B) {
	objects := envInt(b, "MESHLOC_IDLE_OBJECTS", 100_000)
	settle := 130 * time.Second
	if s := os.Getenv("MESHLOC_SETTLE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("MESHLOC_SETTLE=%q: %v", s, err)
		}
		settle = d
	}
	const workers = 64

	bin := buildMeshnode(b)
	srv := etcdtest.Single(b)
	etcd := etcdtest.Client(b, srv.Endpoint())
	listen := fmt.Sprintf("127.0.0.1:%d", etcdtest.FreePort(b))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", etcdtest.FreePort(b))
	logPath := filepath.Join(b.TempDir(), "meshnode.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	defer logFile.Close()
	logs := func() string { data, _ := os.ReadFile(logPath); return string(data) }
	cmd := exec.Command(bin, "--name", "n1", "--etcd-endpoints", srv.Endpoint(),
		"--listen", listen, "--http", httpAddr, "--lease-ttl", "5s", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	base := "http://" + httpAddr
	deadline := time.Now().Add(time.Minute)
	for {
		if body, err := get(base + "/healthz"); err == nil && strings.TrimSpace(body) == "ok" {
			break
		}
		select {
		case err := <-exited:
			b.Fatalf("meshnode exited: %v\n%s", err, logs())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Fatalf("meshnode not healthy after a minute\n%s", logs())
		}
	}

	ctx := context.Background()
	c, err := client.New(ctx, client.Config{Etcd: etcd})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Call(ctx, "actor/counter/warmup", "add", "1"); err != nil {
		b.Fatal(err)
	}
	pid := cmd.Process.Pid
	startRSS := procStatus(b, pid, "VmRSS")

	var elapsed time.Duration
	round := 0
	for b.Loop() {
		round++
		start := time.Now()
		var next, failed atomic.Int64
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
	rss := procStatus(b, pid, "VmRSS")
	peak := procStatus(b, pid, "VmHWM")
	heap := metric(b, base, "go_memstats_heap_inuse_bytes")
	if hosted := metric(b, base, "meshloc_hosted_objects"); hosted >= 0 && int(hosted) != objects+1 {
		b.Fatalf("node hosts %v objects, want %d", hosted, objects+1)
	}
	b.Logf("%d objects in %v; node RSS %d → %d MiB (peak %d), heap in use %.0f MiB",
		objects, elapsed.Round(time.Millisecond), startRSS>>20, rss>>20, peak>>20, heap/(1<<20))

	time.Sleep(settle)
	settledRSS := procStatus(b, pid, "VmRSS")
	settledHeap := metric(b, base, "go_memstats_heap_inuse_bytes")
	b.Logf("after %v idle: node RSS %d MiB, heap in use %.0f MiB", settle, settledRSS>>20, settledHeap/(1<<20))

	const mib = 1 << 20
	b.ReportMetric(float64(rss)/mib, "rss-MiB")
	b.ReportMetric(float64(peak)/mib, "peak-rss-MiB")
	b.ReportMetric(float64(settledRSS)/mib, "settled-rss-MiB")
	b.ReportMetric(settledHeap/mib, "settled-heap-MiB")
	b.ReportMetric((float64(settledRSS)-float64(startRSS))/float64(objects), "rss-B/object")
	b.ReportMetric(float64(objects)/elapsed.Seconds(), "objects/s")
}

func envInt(b *testing.B, name string, def int) int {
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

// buildMeshnode builds ./cmd/meshnode into a temporary directory.
func buildMeshnode(b *testing.B) string {
	b.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		b.Fatalf("go env GOMOD: %v", err)
	}
	bin := filepath.Join(b.TempDir(), "meshnode")
	build := exec.Command("go", "build", "-o", bin, "./cmd/meshnode")
	build.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build ./cmd/meshnode: %v\n%s", err, out)
	}
	return bin
}

func get(url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(body), err
}

// metric reads an unlabelled sample from the node's /metrics; -1 if absent.
func metric(b *testing.B, base, name string) float64 {
	b.Helper()
	body, err := get(base + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	s := bufio.NewScanner(strings.NewReader(body))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) == 2 && (f[0] == name || strings.HasPrefix(f[0], name+"{")) {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				b.Fatalf("metric %q: %v", s.Text(), err)
			}
			return v
		}
	}
	return -1
}

// procStatus reads a kB field of /proc/<pid>/status, in bytes (Linux).
func procStatus(b *testing.B, pid int, field string) uint64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	s := bufio.NewScanner(bytes.NewReader(data))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) == 3 && f[0] == field+":" && f[2] == "kB" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				b.Fatalf("%s: %v", s.Text(), err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
