package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/tcpproxy"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Tests of durable objects (durable.go, docs/design.md §5a).

func durableCode(err error) pb.Code {
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Code
	}
	return pb.Code_CODE_UNSPECIFIED
}

// persisted reads what etcd holds for obj.
func (m *mesh) persisted(t *testing.T, obj string) authority.StateRead {
	t.Helper()
	o, err := keyspace.ParseObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := authority.New(m.etcd, keyspace.Default()).ReadState(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// persistedRead restores obj's persisted state into a fresh instance of its
// type and returns its answer to method (a read).
func (m *mesh) persistedRead(t *testing.T, obj, method string) string {
	t.Helper()
	r := m.persisted(t, obj)
	if !r.Found {
		t.Fatalf("%s: nothing persisted", obj)
	}
	o, _ := keyspace.ParseObject(obj)
	typ, err := registry(t).Lookup(o.Type)
	if err != nil {
		t.Fatal(err)
	}
	inst := typ.New()
	if err := inst.Restore(r.Value.State); err != nil {
		t.Fatal(err)
	}
	out, err := inst.Handle(nil, method, nil)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// waitUntil waits until cond answers nil, at most within; the test fails
// with cond's last answer.
func waitUntil(t testing.TB, within time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, within, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func items(t *testing.T, r *client.Reply) []string {
	t.Helper()
	var v struct{ Items []string }
	if err := json.Unmarshal(r.Payload, &v); err != nil {
		t.Fatalf("reply %s: %v", r.Payload, err)
	}
	return v.Items
}

// moveTo relocates obj to target if another node owns it.
func (m *mesh) moveTo(t *testing.T, obj string, target *node.Node) {
	t.Helper()
	src := m.owner(t, obj)
	if src == target {
		return
	}
	st, err := src.Relocate(context.Background(), obj, node.RelocateOptions{Target: target.Self().ID})
	if err != nil || st.GetOutcome() != "completed" {
		t.Fatalf("relocate %s to %s: %+v %v", obj, target.Self(), st, err)
	}
}

// The owner of durable objects crashes (cut off from etcd: its lease
// expires, as after kill -9, and it fences itself): the next call re-creates
// them on the survivor from etcd. Every acknowledged change is there, a
// retry of an acknowledged request is answered from the persisted reply
// table (not executed twice), a caller that knew the old object generation
// is served normally (no STATE_LOST), and timers resume. A memory object of
// the same node, by contrast, is declared lost.
// cuttableMesh is a mesh on an embedded etcd that a node added with
// addCut reaches through px: a test cuts it off (px.SetMode(
// tcpproxy.Blackhole)) as kill -9 would, and its lease runs out.
func cuttableMesh(t *testing.T) (*mesh, *tcpproxy.Proxy) {
	srv := etcdtest.Single(t)
	m := &mesh{etcd: etcdtest.Client(t, srv.Endpoint()), ep: srv.Endpoint()}
	px, err := tcpproxy.New("127.0.0.1:0", strings.TrimPrefix(srv.Endpoint(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() }) // after the nodes stopped (cleanups run last first)
	return m, px
}

// addCut adds a node whose etcd is behind px.
func (m *mesh) addCut(t *testing.T, px *tcpproxy.Proxy, name string, mutate ...func(int, *node.Config)) *node.Node {
	n := m.add(t, name, append(mutate, func(_ int, c *node.Config) {
		c.EtcdEndpoints = []string{"http://" + px.Addr()}
		c.CallTimeout = 2 * time.Second // its calls end soon once it is cut off
	})...)
	t.Cleanup(func() { px.SetMode(tcpproxy.Forward); px.ResetConns() }) // it stops quickly
	return n
}

func TestDurableSurvivesOwnerCrash(t *testing.T) {
	m, px := cuttableMesh(t)
	n1 := m.addCut(t, px, "n1")
	n2 := m.add(t, "n2")
	ctx := context.Background()
	// Through n2, so that the client keeps a gateway when n1 is gone.
	c := newClient(t, client.Config{Nodes: []string{n2.Address()}, Timeout: 30 * time.Second})

	const counter, list, tick, mem = "actor/dcounter/k", "actor/dlist/l", "actor/dticker/t", "actor/counter/m"
	for obj, read := range map[string]string{counter: "get", list: "read", tick: "read", mem: "get"} {
		if _, err := c.Call(ctx, obj, read); err != nil {
			t.Fatalf("activate %s: %v", obj, err)
		}
		m.moveTo(t, obj, n1)
	}
	for i := 1; i <= 20; i++ {
		r, err := c.Call(ctx, counter, "add", "1")
		if err != nil || value(t, r) != int64(i) {
			t.Fatalf("add #%d: %+v %v", i, r, err)
		}
	}
	last := wire.NewOperationID()
	r, err := c.CallOp(ctx, last, counter, "add", [][]byte{[]byte("1")})
	if err != nil || value(t, r) != 21 || r.Fence.Owner != n1.Self() || r.Fence.ObjectGeneration != 1 {
		t.Fatalf("last add: %+v %v", r, err)
	}
	var appended []string
	for i := range 10 {
		v := fmt.Sprintf("v%d", i)
		if _, err := c.Call(ctx, list, "append", v); err != nil {
			t.Fatal(err)
		}
		appended = append(appended, v)
	}
	if _, err := c.Call(ctx, tick, "start", "50"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(ctx, mem, "add", "5"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // a few ticks
	if got := m.persistedRead(t, counter, "get"); got != `{"value":21}` {
		t.Fatalf("persisted counter %s before the crash", got)
	}

	// The crash: n1 loses etcd; its lease runs out, its owner key goes.
	px.SetMode(tcpproxy.Blackhole)
	crashed := time.Now()
	waitFencedAndGone(ctx, t, m, n1)
	t.Logf("n1 fenced and its owner key gone %v after it was cut off", time.Since(crashed).Round(time.Millisecond))

	// The retry of the last acknowledged add re-creates the counter on n2:
	// answered from the persisted table, not executed again.
	r, err = c.CallOp(ctx, last, counter, "add", [][]byte{[]byte("1")})
	if err != nil {
		t.Fatalf("retry of the acknowledged add after the crash: %v", err)
	}
	if !r.Replayed || value(t, r) != 21 || r.Fence.Owner != n2.Self() || r.Fence.ObjectGeneration != 2 {
		t.Fatalf("retry after the crash: replayed=%v value %s fence %+v; want the recorded 21, replayed, from n2 under object generation 2", r.Replayed, r.Payload, r.Fence)
	}
	// c knew object generation 1: served normally.
	if r, err = c.Call(ctx, counter, "get"); err != nil || value(t, r) != 21 {
		t.Fatalf("get after the crash: %+v %v", r, err)
	}
	if r, err = c.Call(ctx, counter, "add", "1"); err != nil || value(t, r) != 22 {
		t.Fatalf("first add after the crash: %+v %v", r, err)
	}
	if r, err = c.Call(ctx, list, "read"); err != nil || !slices.Equal(items(t, r), appended) {
		t.Fatalf("list after the crash: %+v %v, want %v", r, err, appended)
	}
	if st := m.persisted(t, counter); st.Value.Owner != n2.Self() || st.Value.ObjectGeneration != 2 || st.Value.Seq != 22 {
		t.Fatalf("persisted after the crash: owner %v o%d seq %d; want n2's, o2, seq 22", st.Value.Owner, st.Value.ObjectGeneration, st.Value.Seq)
	}
	// The ticker resumed from its persisted timers: no index lost or repeated.
	var tk struct {
		Count uint64
		OK    bool
	}
	waitUntil(t, 10*time.Second, "ticker ticking on n2", func() error {
		r, err := c.Call(ctx, tick, "read")
		if err != nil {
			return err
		}
		if err := json.Unmarshal(r.Payload, &tk); err != nil {
			return err
		}
		if r.Fence.Owner != n2.Self() || tk.Count < 10 {
			return fmt.Errorf("%s from %v", r.Payload, r.Fence.Owner)
		}
		return nil
	})
	if !tk.OK {
		t.Errorf("ticker saw a tick index lost or repeated across the crash (count %d)", tk.Count)
	}
	// The memory counter of the same node: declared lost.
	if _, err := c.Call(ctx, mem, "add", "1"); durableCode(err) != pb.Code_CODE_STATE_LOST {
		t.Errorf("memory counter after its owner crashed: %v, want state_lost", err)
	}
}

// A change that would persist more than --durable-max-bytes is refused with
// CODE_STATE_TOO_LARGE and changes nothing: neither the object nor etcd; a
// retry is refused again (it was not recorded as done); the object keeps
// serving.
func TestDurableStateTooLarge(t *testing.T) {
	m := startMesh(t, 1, func(_ int, c *node.Config) { c.DurableMaxBytes = 64 << 10 })
	c := newClient(t, client.Config{Etcd: m.etcd})
	ctx := context.Background()
	const obj = "actor/dblob/b"
	small, err := c.Call(ctx, obj, "fill", "1000", "s")
	if err != nil {
		t.Fatal(err)
	}
	before := m.persisted(t, obj)
	op := wire.NewOperationID()
	for attempt := range 2 {
		_, err = c.CallOp(ctx, op, obj, "fill", [][]byte{[]byte("100000"), []byte("x")})
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != pb.Code_CODE_STATE_TOO_LARGE || !strings.Contains(we.Message, "--durable-max-bytes") {
			t.Fatalf("attempt %d: fill 100000 with a 64 KiB bound: %v, want state_too_large naming the flag", attempt, err)
		}
		t.Logf("attempt %d: %v", attempt, err)
	}
	r, err := c.Call(ctx, obj, "hash")
	if err != nil || string(r.Payload) != string(small.Payload) {
		t.Fatalf("hash after the refusal: %s %v, want %s", r.Payload, err, small.Payload)
	}
	after := m.persisted(t, obj)
	if after.StateVersion != before.StateVersion || after.Value.Seq != before.Value.Seq {
		t.Fatalf("a refused change was persisted: version %d seq %d, was %d/%d", after.StateVersion, after.Value.Seq, before.StateVersion, before.Value.Seq)
	}
	if r, err = c.Call(ctx, obj, "fill", "2000", "s"); err != nil || !strings.Contains(string(r.Payload), `"size":2000`) {
		t.Fatalf("fill 2000 after the refusal: %+v %v", r, err)
	}
}

// A stale owner (its record was committed to another node behind its back)
// executes a request on its copy; its write is refused by the fence, so its
// reply is not a success, it drops the copy, and etcd is unchanged. The
// retry, on the new owner, runs once on the persisted state.
func TestDurableStaleOwnerPersistRefused(t *testing.T) {
	m := startMesh(t, 1)
	n1 := m.nodes[0]
	c := newClient(t, client.Config{Etcd: m.etcd})
	ctx := context.Background()
	const obj = "actor/dcounter/s"
	for i := 1; i <= 5; i++ {
		if _, err := c.Call(ctx, obj, "add", "1"); err != nil {
			t.Fatal(err)
		}
	}
	n2 := m.add(t, "n2")
	store := authority.New(m.etcd, keyspace.Default())
	o, _ := keyspace.ParseObject(obj)
	snap, err := store.Read(ctx, o)
	if err != nil || snap.Record.Owner != n1.Self() {
		t.Fatalf("record %+v %v", snap, err)
	}
	var desc lease.Descriptor
	resp, err := m.etcd.Get(ctx, keyspace.Default().Owner("n2"))
	if err != nil || len(resp.Kvs) == 0 || json.Unmarshal(resp.Kvs[0].Value, &desc) != nil {
		t.Fatalf("n2's descriptor: %v %v", resp, err)
	}
	n2node := authority.NodeRef{RoutingID: desc.RoutingID, Address: n2.Address()}
	w, err := store.Intend(ctx, authority.IntentRequest{Seen: snap, Source: n1.Self(), LeaseID: n1.Keeper().LeaseID(),
		Intent: authority.Intent{RelocationID: "behind-its-back", Target: n2.Self(), TargetNode: n2node, DeadlineMs: time.Now().Add(time.Minute).UnixMilli()}})
	if err != nil || !w.Written {
		t.Fatalf("intent: %+v %v", w, err)
	}
	res, err := store.Commit(ctx, authority.CommitRequest{RelocationID: "behind-its-back", Participants: []authority.Participant{{Expected: w.Snapshot}},
		Target: n2.Self(), TargetNode: n2node})
	if err != nil || !res.Committed {
		t.Fatalf("commit to n2: %+v %v", res, err)
	}
	before := m.persisted(t, obj)

	op := wire.NewOperationID()
	req := &pb.CallRequest{Version: wire.Version, Object: obj, Method: "add", Args: [][]byte{[]byte("1")}, OperationId: op[:], Direct: true}
	rep := n1.Call(ctx, req)
	if rep.GetCode() == pb.Code_CODE_OK {
		t.Fatalf("the stale owner acknowledged a change: %s under %+v", rep.GetPayload(), rep.GetFence())
	}
	if rep.GetCode() != pb.Code_CODE_NOT_OWNER || rep.GetHint().GetFence().GetOwnerId() != "n2" {
		t.Fatalf("stale owner's answer: %v %s (hint %v), want not_owner naming n2", rep.GetCode(), rep.GetMessage(), rep.GetHint())
	}
	t.Logf("stale owner answered %v: %s", rep.GetCode(), rep.GetMessage())
	if after := m.persisted(t, obj); after.StateVersion != before.StateVersion {
		t.Fatalf("the stale owner's write reached etcd (state version %d → %d)", before.StateVersion, after.StateVersion)
	}
	// Fenced at once, dropped just after: the watcher that noticed the
	// commit may have fenced the copy and not yet removed it.
	waitFor(t, 10*time.Second, "the stale owner drops its copy", func() bool { return n1.Hosted() == 0 })
	// The retry reaches n2, which restores the persisted 5 and runs it once.
	r, err := c.CallOp(ctx, op, obj, "add", [][]byte{[]byte("1")})
	if err != nil || value(t, r) != 6 || r.Fence.Owner != n2.Self() || r.Replayed {
		t.Fatalf("retry on the new owner: %+v %v, want 6 from n2", r, err)
	}
	if r, err = c.CallOp(ctx, op, obj, "add", [][]byte{[]byte("1")}); err != nil || value(t, r) != 6 || !r.Replayed {
		t.Fatalf("second retry: %+v %v, want the recorded 6", r, err)
	}
}

// Durable objects relocate like any other, under load: the target's first
// write after the commit succeeds, and etcd always holds every acknowledged
// append, in order.
func TestDurableRelocationUnderLoad(t *testing.T) {
	m := startMesh(t, 2)
	c := newClient(t, client.Config{Etcd: m.etcd})
	ctx := context.Background()
	const obj = "actor/dlist/r"
	if _, err := c.Call(ctx, obj, "append", "first"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := []string{"first"}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			cl := newClient(t, client.Config{Etcd: m.etcd})
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				v := fmt.Sprintf("w%d-%d", w, i)
				if _, err := cl.Call(ctx, obj, "append", v); err == nil {
					mu.Lock()
					acked = append(acked, v)
					mu.Unlock()
				}
			}
		})
	}
	for i := range 4 {
		time.Sleep(100 * time.Millisecond)
		src := m.owner(t, obj)
		st, err := src.Relocate(ctx, obj, node.RelocateOptions{})
		if err != nil {
			t.Fatalf("relocation %d: %v", i, err)
		}
		t.Logf("relocation %d from %s: %s %s, interruption %dµs", i, src.Self(), st.GetOutcome(), st.GetMessage(), st.GetInterruptionUs())
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	r, err := c.Call(ctx, obj, "read")
	if err != nil {
		t.Fatal(err)
	}
	got := items(t, r)
	mu.Lock()
	defer mu.Unlock()
	pos := map[string]int{}
	for i, v := range got {
		if _, dup := pos[v]; dup {
			t.Fatalf("%q twice in the list", v)
		}
		pos[v] = i
	}
	for _, v := range acked {
		if _, ok := pos[v]; !ok {
			t.Fatalf("acknowledged %q missing from the final read", v)
		}
	}
	var inEtcd struct{ Items []string }
	if err := json.Unmarshal([]byte(m.persistedRead(t, obj, "read")), &inEtcd); err != nil || !slices.Equal(inEtcd.Items, got) {
		t.Fatalf("etcd holds %d items, the object %d (%v)", len(inEtcd.Items), len(got), err)
	}
	t.Logf("%d acknowledged appends across 4 relocations, all in etcd", len(acked))
}

// The owner's own record rewrites (the intent of a relocation, a preserve)
// move the authority record's store version under the same fence: a write
// in between is refused as "moved" and made again from the new version, not
// taken for a loss of ownership.
func TestDurableWriteAfterOwnRecordRewrite(t *testing.T) {
	m := startMesh(t, 2)
	c := newClient(t, client.Config{Etcd: m.etcd})
	ctx := context.Background()
	const obj = "actor/dcounter/w"
	if _, err := c.Call(ctx, obj, "add", "1"); err != nil {
		t.Fatal(err)
	}
	owner := m.owner(t, obj)
	other := m.nodes[0]
	if other == owner {
		other = m.nodes[1]
	}
	store := authority.New(m.etcd, keyspace.Default())
	o, _ := keyspace.ParseObject(obj)
	snap, err := store.Read(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	w, err := store.Intend(ctx, authority.IntentRequest{Seen: snap, Source: owner.Self(), LeaseID: owner.Keeper().LeaseID(),
		Intent: authority.Intent{RelocationID: "by-hand", Target: other.Self(), DeadlineMs: time.Now().Add(time.Minute).UnixMilli()}})
	if err != nil || !w.Written {
		t.Fatalf("intent: %+v %v", w, err)
	}
	r, err := c.Call(ctx, obj, "add", "1")
	if err != nil || value(t, r) != 2 || r.Fence.Owner != owner.Self() {
		t.Fatalf("add after the owner's intent: %+v %v", r, err)
	}
	if got := m.persistedRead(t, obj, "get"); got != `{"value":2}` {
		t.Fatalf("persisted %s after the intent, want 2", got)
	}
	p, err := store.Preserve(ctx, authority.PreserveRequest{Seen: w.Snapshot, Source: owner.Self(), RelocationID: "by-hand"})
	if err != nil || !p.Written {
		t.Fatalf("preserve: %+v %v", p, err)
	}
	if r, err = c.Call(ctx, obj, "add", "1"); err != nil || value(t, r) != 3 {
		t.Fatalf("add after the preserve: %+v %v", r, err)
	}
	if got := m.persistedRead(t, obj, "get"); got != `{"value":3}` {
		t.Fatalf("persisted %s after the preserve, want 3", got)
	}
}

// waitFencedAndGone waits until n, cut off from etcd, has seen its lease
// end and its owner key has expired in etcd: its objects are orphans.
func waitFencedAndGone(ctx context.Context, t *testing.T, m *mesh, n *node.Node) {
	t.Helper()
	select {
	case <-n.Keeper().Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s still holds its lease 30 s after it was cut off from etcd", n.Self().ID)
	}
	waitUntil(t, 30*time.Second, n.Self().ID+"'s owner key gone", func() error {
		resp, err := m.etcd.Get(ctx, keyspace.Default().Owner(n.Self().ID))
		if err != nil {
			return err
		}
		if len(resp.Kvs) > 0 && resp.Kvs[0].CreateRevision == n.Self().Generation {
			return errors.New("still there")
		}
		return nil
	})
}
