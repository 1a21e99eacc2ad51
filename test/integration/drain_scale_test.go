package integration

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/client"
)

// drainObjects is how many counters the drains of TestDrainAtScale move:
// more than one message of the old drain answer could hold.
const drainObjects = 20_000

// Issue 30, must show: a node holding 20,000 objects drains with the
// default flags, through meshctl drain and through SIGTERM: every object
// moved, none failed, each counter's value kept. The first node holds them
// all (it is the only one while they are created); meshctl drain moves them
// to n2 and n3; then n3 is drained onto n2 (20,000 there) and, with n4
// started, n2 gets SIGTERM: it moves all 20,000 to n4 and exits 0.
func TestDrainAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	_, etcdURL, admin := startLocationd(t)
	bin := binary(t, "meshnode")
	nodes := map[string]*process{}
	addrs := map[string]string{}
	start := func(name string) {
		addrs[name] = freeAddr(t)
		nodes[name] = startProcess(t, name, bin, "--name", name, "--etcd-endpoints", etcdURL, "--listen", addrs[name],
			"--http", freeAddr(t), "--lease-ttl", meshTTL.String())
		waitOwnerServing(t, admin, &rollingNode{name: name, addr: addrs[name], p: nodes[name]}, 0)
	}
	start("n1")
	c := newClient(t, client.Config{Nodes: []string{addrs["n1"]}})
	names := make([]string, drainObjects)
	ctx := context.Background()
	parallel(t, drainObjects, func(i int) error {
		names[i] = fmt.Sprintf("actor/counter/s%d", i)
		_, err := c.Call(ctx, names[i], "add", strconv.Itoa(i+1))
		return err
	})
	start("n2")
	start("n3")

	meshctl := binary(t, "meshctl")
	t0 := time.Now()
	out, err := exec.Command(meshctl, "--locationd", admin.Base(), "drain", "n1").CombinedOutput()
	if err != nil {
		t.Fatalf("meshctl drain n1: %v\n%s", err, out)
	}
	want := fmt.Sprintf("moved %d, failed 0", drainObjects)
	if !strings.Contains(string(out), want) {
		t.Fatalf("meshctl drain n1 printed no %q:\n%s", want, out)
	}
	t.Logf("meshctl drain n1: %d objects in %s: %s", drainObjects, time.Since(t0).Round(time.Millisecond), lastLine(out))
	if !nodes["n1"].wait(30 * time.Second) {
		t.Fatal("n1 did not exit after its drain")
	}
	if nodes["n1"].err != nil {
		t.Fatalf("n1 exited with %v", nodes["n1"].err)
	}

	// n3's objects go to n2, then SIGTERM drains n2 (20,000) onto n4.
	if out, err := exec.Command(meshctl, "--locationd", admin.Base(), "drain", "n3").CombinedOutput(); err != nil {
		t.Fatalf("meshctl drain n3: %v\n%s", err, out)
	}
	start("n4")
	t0 = time.Now()
	if err := nodes["n2"].stop(5 * time.Minute); err != nil {
		t.Fatalf("SIGTERM n2: %v", err)
	}
	if nodes["n2"].err != nil {
		t.Fatalf("n2 exited with %v after SIGTERM", nodes["n2"].err)
	}
	rep, ok := drainedReport(nodes["n2"].out.String())
	if !ok || rep.Moved != drainObjects || rep.Failed != 0 || rep.EndedEarly != "" {
		t.Fatalf("n2's drain on SIGTERM: %+v (logged: %v)\n%s", rep, ok, nodes["n2"].out)
	}
	t.Logf("SIGTERM to n2: %d objects moved in %s (the drain: %.0f ms)", rep.Moved, time.Since(t0).Round(time.Millisecond), rep.DurationMs)

	// Every counter is on n4 with its value.
	c4 := newClient(t, client.Config{Nodes: []string{addrs["n4"]}})
	var wrong atomic.Int64
	parallel(t, drainObjects, func(i int) error {
		r, err := c4.Call(ctx, names[i], "get")
		if err != nil {
			return err
		}
		if v, err := counterValue(r); err != nil || v != int64(i+1) || r.Node != "n4" {
			if wrong.Add(1) <= 5 {
				t.Errorf("%s = %d on %s (%v), want %d on n4", names[i], v, r.Node, err, i+1)
			}
		}
		return nil
	})
	if k := wrong.Load(); k > 0 {
		t.Fatalf("%d counters lost their value or owner", k)
	}
}

// parallel runs f(0..n-1) with 64 in flight and fails the test on the first
// error.
func parallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var first atomic.Value
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || first.Load() != nil {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		t.Fatal(err)
	}
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
