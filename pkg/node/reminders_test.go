package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/tcpproxy"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/reminder"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Tests of durable reminders (docs/developing/lifecycle.md).

// fired is how many reminder firings obj's persisted counter state counts.
func (m *mesh) fired(t *testing.T, obj string) int64 {
	t.Helper()
	rd := m.persisted(t, obj)
	if !rd.Found {
		return 0
	}
	var s struct {
		Fired int64 `json:"fired"`
	}
	if err := json.Unmarshal(rd.Value.State, &s); err != nil {
		t.Fatal(err)
	}
	return s.Fired
}

// scheduled counts the reminder schedule's entries.
func (m *mesh) scheduled(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := m.etcd.Get(ctx, keyspace.Default().RemindersPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return r.Count
}

// waitNoSchedule waits until the reminder schedule is empty.
func (m *mesh) waitNoSchedule(t *testing.T) {
	t.Helper()
	waitUntil(t, 20*time.Second, "schedule empty", func() error {
		if n := m.scheduled(t); n != 0 {
			return fmt.Errorf("%d entries", n)
		}
		return nil
	})
}

// TestReminderWakesASleepingObject: a reminder due after its object went
// to sleep wakes it and fires once; its schedule entry is then gone. A
// reminder due soon keeps its object awake meanwhile.
func TestReminderWakesASleepingObject(t *testing.T) {
	m := startSleepyMesh(t, 2)
	c := newClient(t, client.Config{Nodes: m.addrs()})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const late, soon = "actor/sleepy/late", "actor/sleepy/soon"
	if _, err := c.Call(ctx, late, "remind", "r", "11000", "0"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(ctx, soon, "remind", "r", "3000", "0"); err != nil {
		t.Fatal(err)
	}
	if n := m.scheduled(t); n != 2 {
		t.Fatalf("%d schedule entries, want 2", n)
	}
	m.waitAsleep(t, late)
	if m.record(t, soon).Record.Asleep() {
		t.Fatal("an object whose reminder is due in 3 s went to sleep")
	}
	waitUntil(t, 30*time.Second, "both fired", func() error {
		if a, b := m.fired(t, late), m.fired(t, soon); a != 1 || b != 1 {
			return fmt.Errorf("fired %d and %d", a, b)
		}
		return nil
	})
	m.waitNoSchedule(t)
	time.Sleep(time.Second) // nothing fires again
	if a, b := m.fired(t, late), m.fired(t, soon); a != 1 || b != 1 {
		t.Fatalf("fired %d and %d, want once each", a, b)
	}
	sum := 0.0
	for _, n := range m.nodes {
		sum += m.metricWith(t, n, "meshloc_reminder_firings_total", map[string]string{"outcome": "ok"})
	}
	if sum != 2 {
		t.Fatalf("%v firings counted, want 2", sum)
	}
}

// TestPeriodicReminderAndCancel: a periodic reminder fires at each due
// time once; cancelled, it fires no more and its entry is dropped.
func TestPeriodicReminderAndCancel(t *testing.T) {
	m := startMesh(t, 2)
	c := newClient(t, client.Config{Nodes: m.addrs()})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const obj = "actor/dcounter/p"
	r, err := c.Call(ctx, obj, "remind", "tick", "500", "1000")
	if err != nil {
		t.Fatal(err)
	}
	var set struct{ DueMs int64 }
	if err := json.Unmarshal(r.Payload, &set); err != nil || set.DueMs == 0 {
		t.Fatalf("remind answered %s: %v", r.Payload, err)
	}
	waitUntil(t, 30*time.Second, "3 firings", func() error {
		if n := m.fired(t, obj); n < 3 {
			return fmt.Errorf("fired %d", n)
		}
		return nil
	})
	if _, err := c.Call(ctx, obj, "unremind", "tick"); err != nil {
		t.Fatal(err)
	}
	stop := time.Now()
	n := m.fired(t, obj)
	// At each due time from the first up to now, once: never more firings
	// than due times.
	if due := (stop.UnixMilli()-set.DueMs)/1000 + 1; n > due {
		t.Fatalf("fired %d times in %d due times", n, due)
	}
	m.waitNoSchedule(t)
	if after := m.fired(t, obj); after != n {
		t.Fatalf("fired %d times after the cancel, %d before", after, n)
	}
}

// TestReminderOfDeletedObject: an object deleted with a reminder set: its
// entry is dropped when it comes due, and no object is created for it.
func TestReminderOfDeletedObject(t *testing.T) {
	m := startMesh(t, 1)
	c := newClient(t, client.Config{Nodes: m.addrs()})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const obj = "actor/dcounter/gone"
	if _, err := c.Call(ctx, obj, "remind", "r", "1000", "0"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(ctx, obj, "delete"); err != nil {
		t.Fatal(err)
	}
	m.waitNoSchedule(t)
	if rec, _ := m.etcdKeys(t, obj); rec != 0 {
		t.Fatal("the firing of a deleted object's reminder created a record")
	}
}

// TestForgedFiring: a firing request from a client that names no reminder
// of the object, or is malformed, runs nothing and is not recorded.
func TestForgedFiring(t *testing.T) {
	m := startMesh(t, 1)
	c := newClient(t, client.Config{Nodes: m.addrs()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const obj = "actor/dcounter/f"
	if _, err := c.Call(ctx, obj, "add", "1"); err != nil {
		t.Fatal(err)
	}
	f := reminder.Firing{Name: "none", Seq: 1, DueMs: time.Now().UnixMilli() - 10}
	args := f.Args()
	for _, cs := range []struct {
		args [][]byte
		want pb.Code
	}{
		{args, pb.Code_CODE_NOT_FOUND},
		{[][]byte{[]byte("x")}, pb.Code_CODE_INVALID_ARGUMENT},
		{[][]byte{[]byte("x"), []byte("01"), []byte("5")}, pb.Code_CODE_INVALID_ARGUMENT},
		{[][]byte{[]byte("bad name!"), []byte("1"), []byte("5")}, pb.Code_CODE_INVALID_ARGUMENT},
	} {
		sargs := make([]string, len(cs.args))
		for i, a := range cs.args {
			sargs[i] = string(a)
		}
		_, err := c.Call(ctx, obj, reminder.Method, sargs...)
		if code := wire.CodeOf(err); code != cs.want {
			t.Errorf("firing %q: %v %v, want %v", sargs, code, err, cs.want)
		}
	}
	if n := m.fired(t, obj); n != 0 {
		t.Fatalf("forged firings ran: fired %d", n)
	}
}

// TestReminderSurvivesOwnerCrash: the owner of an object with reminders is
// cut off from etcd (its lease ends); the reminders still fire, on the
// node that recovers the object: the one-shot once, the periodic one on.
func TestReminderSurvivesOwnerCrash(t *testing.T) {
	m, px := cuttableMesh(t)
	n1 := m.addCut(t, px, "n1")
	n2 := m.add(t, "n2")
	ctx := context.Background()
	c := newClient(t, client.Config{Nodes: []string{n2.Address()}, Timeout: 30 * time.Second})
	const once, every = "actor/dcounter/once", "actor/dcounter/every"
	for _, obj := range []string{once, every} {
		if _, err := c.Call(ctx, obj, "get"); err != nil {
			t.Fatal(err)
		}
		m.moveTo(t, obj, n1)
	}
	if _, err := c.Call(ctx, once, "remind", "r", "6000", "0"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(ctx, every, "remind", "p", "100", "1000"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "periodic firing on n1", func() error {
		if n := m.fired(t, every); n < 1 {
			return fmt.Errorf("fired %d", n)
		}
		return nil
	})
	px.SetMode(tcpproxy.Blackhole)
	waitFencedAndGone(ctx, t, m, n1)
	before := m.fired(t, every)
	waitUntil(t, 30*time.Second, "both firing after the crash", func() error {
		if a, b := m.fired(t, once), m.fired(t, every); a != 1 || b < before+2 {
			return fmt.Errorf("one-shot fired %d, periodic %d (had %d)", a, b, before)
		}
		return nil
	})
	if a := m.fired(t, once); a != 1 {
		t.Fatalf("the one-shot fired %d times", a)
	}
	if st := m.persisted(t, once); st.Value.Owner != n2.Self() {
		t.Fatalf("the one-shot's object persisted by %v, want n2 (recovered there)", st.Value.Owner)
	}
}

// TestLeftoverEntryOfAFiringThatRan: a schedule entry left behind by a
// firing that ran (as a state store beside etcd leaves one when its
// removal after the write fails) is sent again, answered from the
// object's de-duplication table, and removed by the node that sent it:
// the due time ran once.
func TestLeftoverEntryOfAFiringThatRan(t *testing.T) {
	m := startMesh(t, 1)
	c := newClient(t, client.Config{Nodes: m.addrs()})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const obj = "actor/dcounter/left"
	if _, err := c.Call(ctx, obj, "remind", "r", "1000", "0"); err != nil {
		t.Fatal(err)
	}
	entry, err := m.etcd.Get(ctx, keyspace.Default().RemindersPrefix(), clientv3.WithPrefix())
	if err != nil || len(entry.Kvs) != 1 {
		t.Fatalf("schedule: %v, %v", entry, err)
	}
	waitUntil(t, 20*time.Second, "fired", func() error {
		if n := m.fired(t, obj); n != 1 {
			return fmt.Errorf("fired %d", n)
		}
		return nil
	})
	m.waitNoSchedule(t)
	kv := entry.Kvs[0]
	if _, err := m.etcd.Put(ctx, string(kv.Key), string(kv.Value)); err != nil {
		t.Fatal(err)
	}
	m.waitNoSchedule(t)
	if n := m.fired(t, obj); n != 1 {
		t.Fatalf("fired %d times, want once", n)
	}
	if v := m.metricWith(t, m.nodes[0], "meshloc_reminder_sends_total", map[string]string{"result": "replayed"}); v < 1 {
		t.Fatalf("meshloc_reminder_sends_total{result=replayed} = %v", v)
	}
}
