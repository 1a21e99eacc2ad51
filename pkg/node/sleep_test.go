package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/tcpproxy"
	"github.com/meshloc/meshloc/pkg/node"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/wire"
)

// Tests of sleep and wake (docs/developing/lifecycle.md).

// sleepyTypes are the built-in counter as a durable type that sleeps after
// after, a memory type that opted in ("mcounter"), and the memory counter
// with a bound but no opt-in ("awake": it never sleeps).
func sleepyTypes(t testing.TB, after time.Duration) []actor.Type {
	r := registry(t)
	dc, err := r.Lookup("dcounter")
	if err != nil {
		t.Fatal(err)
	}
	mc, err := r.Lookup("counter")
	if err != nil {
		t.Fatal(err)
	}
	dc.Name, dc.SleepAfter = "sleepy", after
	awake := mc
	awake.Name, awake.SleepAfter = "awake", after
	mc.Name, mc.SleepAfter, mc.SleepDropsState = "mcounter", after, true
	return []actor.Type{dc, mc, awake}
}

func startSleepyMesh(t *testing.T, nodes int) *mesh {
	m := startMesh(t, 0)
	m.types = sleepyTypes(t, 100*time.Millisecond)
	for i := range nodes {
		m.add(t, fmt.Sprintf("n%d", i+1))
	}
	return m
}

func (m *mesh) record(t testing.TB, name string) authority.Snapshot {
	t.Helper()
	o, err := keyspace.ParseObject(name)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snap, err := authority.New(m.etcd, keyspace.Default()).Read(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func (m *mesh) waitAsleep(t *testing.T, name string) authority.Snapshot {
	t.Helper()
	var snap authority.Snapshot
	waitUntil(t, 20*time.Second, name+" asleep", func() error {
		if snap = m.record(t, name); !snap.Record.Asleep() {
			return fmt.Errorf("record is %s, owned by %s", snap.Record.State, snap.Record.Owner)
		}
		return nil
	})
	return snap
}

func (m *mesh) hostedSum(t testing.TB) float64 {
	sum := 0.0
	for _, n := range m.nodes {
		sum += m.metric(t, n, "meshloc_hosted_objects")
	}
	return sum
}

// TestDurableObjectSleepsAndWakes: an idle durable object sleeps (its
// record names no owner, no node holds it); the next call wakes it with
// every acknowledged change, and a retry of a request answered before the
// sleep is answered from the persisted replies, not run again.
func TestDurableObjectSleepsAndWakes(t *testing.T) {
	m := startSleepyMesh(t, 2)
	c := newClient(t, client.Config{Nodes: m.addrs()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const obj = "actor/sleepy/s1"
	op := wire.NewOperationID()
	if r, err := c.CallID(ctx, op, obj, "add", "5"); err != nil || value(t, r) != 5 {
		t.Fatalf("first add: %v", err)
	}
	second, err := c.Call(ctx, obj, "add", "2")
	if err != nil || value(t, second) != 7 {
		t.Fatalf("second add: %v", err)
	}
	before := second.Fence
	slept := m.waitAsleep(t, obj)
	if slept.Record.ObjectGeneration != before.ObjectGeneration || slept.Record.AuthorityGeneration != before.AuthorityGeneration+1 {
		t.Fatalf("sleeping record %+v after serving under %+v", slept.Record, before)
	}
	waitUntil(t, 10*time.Second, "no node hosts it", func() error {
		if h := m.hostedSum(t); h != 0 {
			return fmt.Errorf("%v hosted", h)
		}
		return nil
	})

	r, err := c.CallID(ctx, op, obj, "add", "5") // the retry of the first add
	if err != nil || !r.Replayed || value(t, r) != 5 {
		t.Fatalf("retry after the sleep: %v %+v (want the recorded answer 5, replayed)", err, r)
	}
	// Woken under the same object generation, a later authority one (it
	// may have slept and woken again since: a loaded machine).
	if f := r.Fence; f.ObjectGeneration != before.ObjectGeneration || f.AuthorityGeneration <= slept.Record.AuthorityGeneration {
		t.Fatalf("woken under %+v, slept as %+v", f, slept.Record)
	}
	if r, err = c.Call(ctx, obj, "get"); err != nil || value(t, r) != 7 {
		t.Fatalf("get after the wake: %v %+v, want 7", err, r)
	}
	wakes, sleeps := 0.0, 0.0
	for _, n := range m.nodes {
		wakes += m.metric(t, n, "meshloc_wakes_total")
		sleeps += m.metricWith(t, n, "meshloc_sleeps_total", map[string]string{"outcome": "slept"})
	}
	if wakes < 1 || sleeps < 1 {
		t.Fatalf("%v wakes and %v sleeps counted, want at least 1 each", wakes, sleeps)
	}
	// It sleeps again, and wakes again with its state.
	m.waitAsleep(t, obj)
	if r, err = c.Call(ctx, obj, "add", "1"); err != nil || value(t, r) != 8 {
		t.Fatalf("add after the second wake: %v, want 8", err)
	}
}

// TestMemoryObjectSleepsOnlyWhenOptedIn: a memory type that opted in
// sleeps and starts afresh, under the same object generation and without
// CODE_STATE_LOST; one that did not stays awake.
func TestMemoryObjectSleepsOnlyWhenOptedIn(t *testing.T) {
	m := startSleepyMesh(t, 1)
	c := newClient(t, client.Config{Nodes: m.addrs()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, obj := range []string{"actor/mcounter/m1", "actor/awake/a1"} {
		if r, err := c.Call(ctx, obj, "add", "3"); err != nil || value(t, r) != 3 {
			t.Fatalf("%s: add: %v", obj, err)
		}
	}
	gen := m.record(t, "actor/mcounter/m1").Record.ObjectGeneration
	m.waitAsleep(t, "actor/mcounter/m1")
	r, err := c.Call(ctx, "actor/mcounter/m1", "add", "1")
	if err != nil || value(t, r) != 1 {
		t.Fatalf("opted-in memory object after its sleep: %v %+v, want a fresh start (1)", err, r)
	}
	if g := m.record(t, "actor/mcounter/m1").Record.ObjectGeneration; g != gen {
		t.Fatalf("object generation %d after the wake, want %d", g, gen)
	}
	// The other was idle as long and is still awake, with its state.
	if snap := m.record(t, "actor/awake/a1"); snap.Record.Asleep() {
		t.Fatal("a memory type that did not opt in went to sleep")
	}
	if r, err := c.Call(ctx, "actor/awake/a1", "get"); err != nil || value(t, r) != 3 {
		t.Fatalf("awake object: %v", err)
	}
}

// TestTimersKeepAnObjectAwake: an object with a timer armed does not
// sleep (its timers fire only while it is awake).
func TestTimersKeepAnObjectAwake(t *testing.T) {
	m := startMesh(t, 0)
	r := registry(t)
	dt, err := r.Lookup("dticker")
	if err != nil {
		t.Fatal(err)
	}
	dt.Name, dt.SleepAfter = "sleepyticker", 50*time.Millisecond
	m.types = []actor.Type{dt}
	m.add(t, "n1")
	c := newClient(t, client.Config{Nodes: m.addrs()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Call(ctx, "actor/sleepyticker/t1", "start", "3600000"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(ctx, "actor/sleepyticker/t2", "read"); err != nil {
		t.Fatal(err)
	}
	m.waitAsleep(t, "actor/sleepyticker/t2") // idle, no timer
	if m.record(t, "actor/sleepyticker/t1").Record.Asleep() {
		t.Fatal("an object with a timer armed went to sleep")
	}
}

// TestDirectClientWakesSleepingObjects: a client that routes by its own
// location cache (etcd) finds no owner for a sleeping object, calls a
// serving node, and that node wakes it; many objects asleep at once wake
// with their state.
func TestDirectClientWakesSleepingObjects(t *testing.T) {
	m := startSleepyMesh(t, 2)
	c := newClient(t, client.Config{EtcdEndpoints: []string{m.ep}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 200
	for i := range n {
		if _, err := c.Call(ctx, fmt.Sprintf("actor/sleepy/d%d", i), "add", fmt.Sprint(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 20*time.Second, "all asleep", func() error {
		if h := m.hostedSum(t); h != 0 {
			return fmt.Errorf("%v awake", h)
		}
		return nil
	})
	for i := range n {
		r, err := c.Call(ctx, fmt.Sprintf("actor/sleepy/d%d", i), "get")
		if err != nil || value(t, r) != int64(i+1) {
			t.Fatalf("d%d after its wake: %v, want %d", i, err, i+1)
		}
	}
}

// TestUncertainSleepDropsTheObject: a sleep whose transaction etcd leaves
// unanswered (the node cut off from etcd while it runs) may have happened,
// so the node drops the object instead of serving on; once etcd answers
// again the next call finds the record still the node's and loads the
// durable state: nothing lost.
func TestUncertainSleepDropsTheObject(t *testing.T) {
	srv := etcdtest.Single(t)
	m := &mesh{etcd: etcdtest.Client(t, srv.Endpoint()), ep: srv.Endpoint()}
	m.types = sleepyTypes(t, 300*time.Millisecond)
	px, err := tcpproxy.New("127.0.0.1:0", strings.TrimPrefix(srv.Endpoint(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	n1 := m.add(t, "n1", func(_ int, c *node.Config) {
		c.EtcdEndpoints = []string{"http://" + px.Addr()}
		c.CallTimeout = time.Second // the sleep's transaction gives up within it
		// A sent write waits for etcd's answer up to the store's batch
		// timeout (5 s): the lease outlives the cut.
		c.LeaseTTL = 20 * time.Second
	})
	t.Cleanup(func() { px.SetMode(tcpproxy.Forward) })
	c := newClient(t, client.Config{Nodes: []string{n1.Address()}, Timeout: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const obj = "actor/sleepy/u1"
	if r, err := c.Call(ctx, obj, "add", "9"); err != nil || value(t, r) != 9 {
		t.Fatalf("add: %v", err)
	}
	px.SetMode(tcpproxy.Blackhole) // before it is idle long enough: its sleep meets a silent etcd
	cut := time.Now()
	waitUntil(t, 20*time.Second, "a sleep that failed", func() error {
		if f := m.metricWith(t, n1, "meshloc_sleeps_total", map[string]string{"outcome": "failed"}); f < 1 {
			return fmt.Errorf("%v failed sleeps", f)
		}
		return nil
	})
	px.SetMode(tcpproxy.Forward)
	t.Logf("the sleep failed %v after etcd was cut off", time.Since(cut).Round(time.Millisecond))
	if h := m.metric(t, n1, "meshloc_hosted_objects"); h != 0 {
		t.Fatalf("%v objects still hosted after an uncertain sleep", h)
	}
	r, err := c.Call(ctx, obj, "get")
	if err != nil || value(t, r) != 9 {
		t.Fatalf("after the uncertain sleep: %v, want 9", err)
	}
}
