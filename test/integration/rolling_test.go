package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/node/execlog"

	"github.com/meshloc/meshloc/internal/verify"
	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// rollingNode is one meshnode process with the arguments it is restarted with.
type rollingNode struct {
	name, addr, execLog string
	args                []string
	p                   *process
	gen                 int64
}

// drainedLine is the node's log line that ends a drain (pkg/node).
type drainedLine struct {
	Message     string  `json:"message"`
	Moved       int     `json:"moved"`
	Failed      int     `json:"failed"`
	Relocations int     `json:"relocations"`
	DurationMs  float64 `json:"durationMs"`
	EndedEarly  string  `json:"endedEarly"`
}

func drainedReport(out string) (drainedLine, bool) {
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var last drainedLine
	found := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `"message":"drained"`) {
			continue
		}
		var d drainedLine
		if json.Unmarshal([]byte(line), &d) == nil && d.Message == "drained" {
			last, found = d, true
		}
	}
	return last, found
}

// waitOwnerServing waits until /v1/owners lists the node serving at its
// address with a generation above after, and records it.
func waitOwnerServing(t *testing.T, cl *client.Admin, nd *rollingNode, after int64) {
	t.Helper()
	waitFor(t, time.Minute, nd.name+" serving", func(ctx context.Context) error {
		r, _, err := cl.Owners(ctx)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(r.Owners, func(o api.Owner) bool { return o.ID == nd.name })
		if i < 0 {
			return fmt.Errorf("%s not in /v1/owners", nd.name)
		}
		o := r.Owners[i]
		if o.State != "serving" || o.Address != nd.addr || o.Generation <= after {
			return fmt.Errorf("%s is %s at %s, generation %d", nd.name, o.State, o.Address, o.Generation)
		}
		nd.gen = o.Generation
		return nil
	}, nd.p)
}

// Issue 6, must show: a rolling restart of 3 meshnodes (each drained by
// SIGTERM, then restarted with the same name and addresses) under continuous
// load from 8 callers — half routing from etcd straight to owners, half
// through gateways; each appends unique values to lists and adds to
// counters, retrying a call that got no answer with the same operation id
// within its deadline. Then: 0 failed calls, every acknowledged append
// present exactly once (and nothing else), every counter equal to the sum of
// its acknowledged adds, and the nodes' execution logs show no operation
// executed twice and no fence served by two owners.
func TestRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	_, etcdURL, cl := startLocationd(t)
	bin := binary(t, "meshnode")
	dir := t.TempDir()
	var nodes []*rollingNode
	for i := range 3 {
		nd := &rollingNode{name: fmt.Sprintf("n%d", i+1), addr: freeAddr(t)}
		nd.execLog = filepath.Join(dir, nd.name+".exec.jsonl")
		nd.args = []string{"--name", nd.name, "--etcd-endpoints", etcdURL, "--listen", nd.addr, "--http", freeAddr(t),
			"--lease-ttl", meshTTL.String(), "--exec-log", nd.execLog}
		nd.p = startProcess(t, nd.name, bin, nd.args...)
		nodes = append(nodes, nd)
	}
	// Runs before the processes' own cleanups: every node drains at once
	// (nowhere to go: quick), bounded generously.
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, nd := range nodes {
			wg.Go(func() {
				if err := nd.p.stop(90 * time.Second); err != nil {
					t.Errorf("%s: %v", nd.name, err)
				}
			})
		}
		wg.Wait()
	})
	for _, nd := range nodes {
		waitOwnerServing(t, cl, nd, 0)
	}
	var addrs []string
	for _, nd := range nodes {
		addrs = append(addrs, nd.addr)
	}

	const lists, counters, callers = 12, 12, 8
	var names []string
	for i := range lists {
		names = append(names, fmt.Sprintf("actor/list/rr%d", i))
	}
	for i := range counters {
		names = append(names, fmt.Sprintf("actor/counter/rr%d", i))
	}
	clients := make([]*client.Client, callers)
	for w := range callers {
		if w%2 == 0 {
			clients[w] = newClient(t, client.Config{EtcdEndpoints: []string{etcdURL}})
		} else {
			clients[w] = newClient(t, client.Config{Nodes: addrs})
		}
	}
	for _, n := range names {
		if _, _, err := rollingCall(clients[0], n, readOf(n), ""); err != nil {
			t.Fatalf("activate %s: %v", n, err)
		}
	}

	type ack struct{ object, value string }
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var calls, retries, failed atomic.Int64
	acks := make([][]ack, callers)
	var errMu sync.Mutex
	var callErrs []string
	for w := range callers {
		wg.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				obj := names[(w*5+k*7)%len(names)]
				method, v := "append", fmt.Sprintf("w%d-%d", w, k)
				if strings.HasPrefix(obj, "actor/counter/") {
					method, v = "add", strconv.Itoa(1+(w+k)%9)
				}
				n, _, err := rollingCall(clients[w], obj, method, v)
				calls.Add(1)
				retries.Add(int64(n))
				if err != nil {
					failed.Add(1)
					errMu.Lock()
					callErrs = append(callErrs, fmt.Sprintf("%s %s %s: %v", obj, method, v, err))
					errMu.Unlock()
					continue
				}
				acks[w] = append(acks[w], ack{obj, v})
			}
		})
	}
	time.Sleep(time.Second)

	type drainFig struct {
		node        string
		took        time.Duration
		rep         drainedLine
		callsDuring int64
	}
	var figs []drainFig
	for _, nd := range nodes {
		before := calls.Load()
		start := time.Now()
		if err := nd.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if !nd.p.wait(2 * time.Minute) {
			t.Fatalf("%s did not exit within 2 minutes of SIGTERM", nd.name)
		}
		took := time.Since(start)
		if nd.p.err != nil {
			t.Fatalf("%s exited with %v after SIGTERM, want status 0", nd.name, nd.p.err)
		}
		rep, ok := drainedReport(nd.p.out.String())
		if !ok {
			t.Fatalf("%s logged no drain report:\n%s", nd.name, nd.p.out)
		}
		if rep.Failed != 0 || rep.EndedEarly != "" {
			t.Errorf("%s drain: %+v", nd.name, rep)
		}
		old := nd.gen
		nd.p = startProcess(t, nd.name, bin, nd.args...)
		waitOwnerServing(t, cl, nd, old)
		figs = append(figs, drainFig{node: nd.name, took: took, rep: rep, callsDuring: calls.Load() - before})
		time.Sleep(500 * time.Millisecond) // load on the full mesh before the next one
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()

	for _, e := range callErrs {
		t.Errorf("failed call: %s", e)
	}
	// Every acknowledged append exactly once, nothing else; counters equal
	// the sum of their acknowledged adds.
	want := map[string]map[string]bool{}
	sums := map[string]int64{}
	for w := range callers {
		for _, a := range acks[w] {
			if strings.HasPrefix(a.object, "actor/counter/") {
				v, _ := strconv.Atoi(a.value)
				sums[a.object] += int64(v)
				continue
			}
			if want[a.object] == nil {
				want[a.object] = map[string]bool{}
			}
			want[a.object][a.value] = true
		}
	}
	lost, dup, extra := 0, 0, 0
	for _, n := range names {
		_, r, err := rollingCall(clients[1], n, readOf(n), "")
		if err != nil {
			t.Fatalf("final read of %s: %v", n, err)
		}
		if strings.HasPrefix(n, "actor/counter/") {
			v, err := counterValue(r)
			if err != nil || v != sums[n] {
				t.Errorf("%s = %d (%v), acknowledged adds sum to %d", n, v, err, sums[n])
			}
			continue
		}
		var got struct{ Items []string }
		if err := json.Unmarshal(r.Payload, &got); err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, it := range got.Items {
			seen[it]++
			if seen[it] == 2 {
				dup++
			}
			if !want[n][it] && seen[it] == 1 {
				extra++
			}
		}
		for v := range want[n] {
			if seen[v] == 0 {
				lost++
			}
		}
	}
	if lost+dup+extra > 0 {
		t.Errorf("lists: %d acknowledged appends lost, %d present twice, %d present unacknowledged", lost, dup, extra)
	}
	// The execution logs of every life of every node.
	var paths []string
	for _, nd := range nodes {
		paths = append(paths, nd.execLog)
	}
	logs, stats, err := execlog.ReadFiles(paths...)
	if err != nil {
		t.Fatal(err)
	}
	ec := verify.CheckExecLogs(logs, nil)
	if ec.DoubleExecutions != 0 || ec.TwoOwnerWindows != 0 {
		for _, v := range ec.Violations {
			t.Errorf("execution logs: %s %s: %s", v.Check, v.Object, v.Detail)
		}
		t.Errorf("execution logs: %d executed twice, %d two-owner windows", ec.DoubleExecutions, ec.TwoOwnerWindows)
	}
	var acked int
	for w := range callers {
		acked += len(acks[w])
	}
	t.Logf("calls %d (acknowledged %d, failed %d, retries %d); lost %d, duplicated %d; execution logs: %d owners, %d operations, executed twice %d, two-owner windows %d (%+v)",
		calls.Load(), acked, failed.Load(), retries.Load(), lost, dup, ec.Nodes, ec.Operations, ec.DoubleExecutions, ec.TwoOwnerWindows, stats)
	for _, f := range figs {
		t.Logf("%s: SIGTERM to exit %v; drain moved %d objects in %.1f ms (%d relocations, %d failed); %d calls meanwhile",
			f.node, f.took.Round(time.Millisecond), f.rep.Moved, f.rep.DurationMs, f.rep.Relocations, f.rep.Failed, f.callsDuring)
	}
}

func readOf(name string) string {
	if strings.HasPrefix(name, "actor/counter/") {
		return "get"
	}
	return "read"
}

// rollingCall calls with one operation id, retrying (the same id) a call
// that got no final answer, within a 45 s deadline; it returns the number of
// retries and the reply.
func rollingCall(c *client.Client, name, method, arg string) (int, *client.Reply, error) {
	op := wire.NewOperationID()
	var args [][]byte
	if arg != "" {
		args = [][]byte{[]byte(arg)}
	}
	deadline := time.Now().Add(45 * time.Second)
	for retries := 0; ; retries++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := c.CallBytes(ctx, op, name, method, args)
		cancel()
		if err == nil {
			return retries, r, nil
		}
		var we *wire.Error
		if errors.As(err, &we) && !wire.Retryable(we.Code) && we.Code != pb.Code_CODE_DEADLINE_EXCEEDED {
			return retries, nil, err
		}
		if time.Now().After(deadline) {
			return retries, nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
