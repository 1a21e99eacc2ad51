package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// populate makes every object live on the mesh's only node (n1) so that a
// drain of n1 has them all to move: counters with the value i+1, lists with
// the items "<i>-0".."<i>-2".
func populate(t *testing.T, m *mesh, counters, lists int) (names []string) {
	t.Helper()
	if len(m.nodes) != 1 {
		t.Fatal("populate wants a mesh of one node")
	}
	c := newClient(t, client.Config{Etcd: m.etcd})
	ctx := context.Background()
	for i := range counters {
		name := fmt.Sprintf("actor/counter/d%d", i)
		if _, err := c.Call(ctx, name, "add", strconv.Itoa(i+1)); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	for i := range lists {
		name := fmt.Sprintf("actor/list/d%d", i)
		for k := range 3 {
			if _, err := c.Call(ctx, name, "append", fmt.Sprintf("%d-%d", i, k)); err != nil {
				t.Fatal(err)
			}
		}
		names = append(names, name)
	}
	if got := m.nodes[0].Hosted(); got != len(names) {
		t.Fatalf("n1 hosts %d objects, want %d", got, len(names))
	}
	return names
}

func ownerOf(t testing.TB, m *mesh, name string) authority.OwnerRef {
	t.Helper()
	obj, _ := keyspace.ParseObject(name)
	snap, err := authority.New(m.etcd, keyspace.Default()).Read(context.Background(), obj)
	if err != nil {
		t.Fatal(err)
	}
	return snap.Record.Owner
}

// Drain moves every object away with its state; the node hosts nothing,
// advertises draining, and its Stop then loses nothing.
func TestDrainMovesEveryObject(t *testing.T) {
	m := startMesh(t, 1)
	names := populate(t, m, 12, 6)
	m.add(t, "n2")
	m.add(t, "n3")
	n1 := m.nodes[0]
	var mu sync.Mutex
	var events []node.DrainEvent
	rep, err := n1.Drain(context.Background(), node.DrainOptions{Progress: func(e node.DrainEvent) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Moved) != len(names) || len(rep.Failed) != 0 || rep.EndedEarly != "" {
		t.Fatalf("report: moved %d failed %v ended early %q; want %d moved", len(rep.Moved), rep.Failed, rep.EndedEarly, len(names))
	}
	if n1.Hosted() != 0 {
		t.Fatalf("n1 still hosts %d objects", n1.Hosted())
	}
	owners, _, err := lease.ListOwners(context.Background(), m.etcd, keyspace.Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range owners {
		if o.Descriptor.OwnerID == "n1" && o.Descriptor.State != lease.StateDraining {
			t.Fatalf("n1 advertises %s, want draining", o.Descriptor.State)
		}
	}
	perTarget := map[string]int{}
	for _, mv := range rep.Moved {
		perTarget[mv.Target]++
		if got := ownerOf(t, m, mv.Object); got.String() != mv.Target || got.ID == "n1" {
			t.Errorf("%s: owner %s, report says %s", mv.Object, got, mv.Target)
		}
	}
	if len(perTarget) != 2 {
		t.Errorf("the drain did not spread the objects: %v", perTarget)
	}
	mu.Lock()
	kinds := map[node.DrainEventKind]int{}
	for _, e := range events {
		kinds[e.Kind]++
	}
	last := events[len(events)-1]
	mu.Unlock()
	if kinds[node.DrainStarted] != 1 || kinds[node.DrainMoved] != len(names) || kinds[node.DrainFailed] != 0 {
		t.Errorf("events by kind: %v", kinds)
	}
	if last.Moved != len(names) || last.Remaining != 0 {
		t.Errorf("last event %+v", last)
	}
	// Stop now revokes the lease: nothing it hosted is lost.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n1.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, client.Config{Etcd: m.etcd})
	for i, name := range names {
		r, err := c.Call(context.Background(), name, readMethod(name))
		if err != nil {
			t.Fatalf("%s after the drain: %v", name, err)
		}
		if i < 12 {
			if v := value(t, r); v != int64(i+1) {
				t.Errorf("%s = %d, want %d", name, v, i+1)
			}
			continue
		}
		var got struct{ Items []string }
		_ = json.Unmarshal(r.Payload, &got)
		k := i - 12
		if want := []string{fmt.Sprintf("%d-0", k), fmt.Sprintf("%d-1", k), fmt.Sprintf("%d-2", k)}; !slices.Equal(got.Items, want) {
			t.Errorf("%s = %v, want %v", name, got.Items, want)
		}
	}
	t.Logf("drained %d objects in %v (%d relocations): %v", len(rep.Moved), rep.Duration, rep.Relocations, perTarget)
}

// A draining node refuses PREPAREs (ShuttingDown: the source keeps the
// object), is never chosen as a target, and activates nothing new; calls
// through it as a gateway keep working.
func TestDrainingNodeTakesNothing(t *testing.T) {
	m := startMesh(t, 3)
	n1, n2 := m.nodes[0], m.nodes[1]
	// n1 drains with nothing hosted; it stays up, draining.
	rep, err := n1.Drain(context.Background(), node.DrainOptions{})
	if err != nil || len(rep.Moved)+len(rep.Failed) != 0 {
		t.Fatalf("drain of an empty node: %+v %v", rep, err)
	}
	if !n1.Draining() {
		t.Fatal("n1 is not draining")
	}
	// Placement reads each node's owner directory, which a watch keeps:
	// wait until every node saw n1 draining.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if m.nodes[1].DirectoryState("n1") == lease.StateDraining && m.nodes[2].DirectoryState("n1") == lease.StateDraining {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("n2 and n3 did not see n1 draining within 10 s")
		}
	}
	gw := newClient(t, client.Config{Nodes: []string{n1.Address()}})
	direct := newClient(t, client.Config{Etcd: m.etcd})
	ctx := context.Background()
	// New objects called through n1 (a gateway) are placed elsewhere.
	var names []string
	for i := range 20 {
		name := fmt.Sprintf("actor/counter/g%d", i)
		if _, err := gw.Call(ctx, name, "add", "1"); err != nil {
			t.Fatalf("%s through draining n1: %v", name, err)
		}
		if o := ownerOf(t, m, name); o.ID == "n1" {
			t.Fatalf("%s activated on draining n1", name)
		}
		names = append(names, name)
	}
	// A direct call to n1 for an object nobody owns is refused, retryably.
	conn, err := grpc.NewClient(n1.Address(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	op := wire.NewOperationID()
	r, err := rpcpb.NewCallServiceClient(conn).Call(ctx, &pb.CallRequest{Version: wire.Version, Object: "actor/counter/direct", Method: "get", OperationId: op[:], Direct: true})
	if err != nil || r.GetCode() != pb.Code_CODE_SHUTTING_DOWN {
		t.Fatalf("direct activation on draining n1: %v %v", r, err)
	}
	if _, err := authority.New(m.etcd, keyspace.Default()).Read(ctx, keyspace.Actor("counter", "direct")); !errors.Is(err, authority.ErrNotFound) {
		t.Fatalf("the refused activation left a record: %v", err)
	}
	// Placement on the other nodes never chooses n1.
	for round := range 20 {
		name := names[round%len(names)]
		src := m.owner(t, name)
		st, err := src.Relocate(ctx, name, node.RelocateOptions{})
		if err != nil {
			t.Fatalf("relocate %s: %v", name, err)
		}
		if st.GetOutcome() != "completed" || ownerOf(t, m, name).ID == "n1" {
			t.Fatalf("relocation of %s: %s %s to %s", name, st.GetOutcome(), st.GetMessage(), st.GetTarget())
		}
	}
	// Named as the target, n1 refuses before staging anything: the source
	// keeps the object (the node's target check may refuse first, from the
	// directory; the PREPARE itself is refused too, below).
	name := names[0]
	src := m.owner(t, name)
	st, err := src.Relocate(ctx, name, node.RelocateOptions{Target: "n1"})
	if err == nil {
		t.Fatalf("relocation to draining n1: %+v", st)
	}
	if !errors.Is(err, node.ErrNoTarget) {
		t.Fatalf("relocation to draining n1: %v", err)
	}
	// The PREPARE itself: n2 sees n1 serving (its directory is told so
	// while n1's flag says draining), n1 answers ShuttingDown.
	n3 := m.nodes[2]
	n3.SetDraining(true) // the flag only: its descriptor still says serving
	defer n3.SetDraining(false)
	if src != n2 {
		if st, err := src.Relocate(ctx, name, node.RelocateOptions{Target: "n2"}); err != nil || st.GetOutcome() != "completed" {
			t.Fatalf("move %s to n2 first: %v %v", name, st, err)
		}
	}
	st, err = n2.Relocate(ctx, name, node.RelocateOptions{Target: "n3"})
	if err != nil {
		t.Fatal(err)
	}
	// (The source may see its chunk stream broken before it reads the
	// FAILED frame: its code is then UNAVAILABLE; the target's says why.)
	if st.GetOutcome() != "aborted" {
		t.Fatalf("PREPARE to a draining node: %s %v %s", st.GetOutcome(), st.GetCode(), st.GetMessage())
	}
	var ta *pb.RelocationStatus
	for _, r := range n3.Relocations() {
		if r.GetRole() == "target" && string(r.GetRelocationId()) == string(st.GetRelocationId()) {
			ta = r
		}
	}
	if ta == nil || ta.GetOutcome() != "shutdown" || ta.GetCode() != pb.Code_CODE_SHUTTING_DOWN {
		t.Fatalf("target side of the refused PREPARE: %v", ta)
	}
	if o := ownerOf(t, m, name); o.ID != "n2" {
		t.Fatalf("after the refused PREPARE %s is owned by %s, want n2", name, o)
	}
	if r, err := direct.Call(ctx, name, "get"); err != nil || value(t, r) < 1 {
		t.Fatalf("%s after the refused PREPARE: %v", name, err)
	}
}

// Bad options are refused with a typed error and change nothing.
func TestDrainBadOptions(t *testing.T) {
	m := startMesh(t, 1)
	n1 := m.nodes[0]
	for _, o := range []node.DrainOptions{{Concurrency: -1}, {Concurrency: node.MaxDrainConcurrency + 1}, {Timeout: -time.Second}, {Timeout: 2 * time.Hour}, {Attempts: -1}} {
		if _, err := n1.Drain(context.Background(), o); !errors.Is(err, node.ErrInvalidDrain) {
			t.Errorf("Drain(%+v): %v, want ErrInvalidDrain", o, err)
		}
	}
	if n1.Draining() {
		t.Fatal("a refused drain left the node draining")
	}
	// The same through AdminService.
	conn, err := grpc.NewClient(n1.Address(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s, err := rpcpb.NewAdminServiceClient(conn).Drain(context.Background(), &pb.DrainRequest{TimeoutMs: -5})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.InvalidArgument || n1.Draining() {
		t.Fatalf("Drain timeout_ms -5: %v (draining %v)", err, n1.Draining())
	}
}

// With no other node to take them, objects are reported failed with the
// reason, and stay hosted (lost only when the node stops).
func TestDrainNowhereToGo(t *testing.T) {
	m := startMesh(t, 1)
	names := populate(t, m, 2, 0)
	n1 := m.nodes[0]
	rep, err := n1.Drain(context.Background(), node.DrainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Moved) != 0 || len(rep.Failed) != len(names) || rep.Relocations != 0 {
		t.Fatalf("report %+v", rep)
	}
	for _, f := range rep.Failed {
		if f.Attempts != 0 || !strings.Contains(f.Reason, "no relocation target") || f.Code != pb.Code_CODE_UNAVAILABLE {
			t.Errorf("failure %+v", f)
		}
	}
	if n1.Hosted() != len(names) {
		t.Fatalf("n1 hosts %d", n1.Hosted())
	}
	t.Logf("failures: %+v", rep.Failed)
}

// AdminService.Drain streams progress and a report, then asks the node to
// stop (stop_after defaults to true).
func TestAdminDrainStreamsAndStops(t *testing.T) {
	m := startMesh(t, 1)
	names := populate(t, m, 5, 0)
	m.add(t, "n2")
	n1 := m.nodes[0]
	conn, err := grpc.NewClient(n1.Address(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s, err := rpcpb.NewAdminServiceClient(conn).Drain(context.Background(), &pb.DrainRequest{Concurrency: 2, List: true})
	if err != nil {
		t.Fatal(err)
	}
	var progress []*pb.DrainProgress
	var rep *pb.DrainReport
	var pages []*pb.DrainPage
	for {
		ev, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if p := ev.GetProgress(); p != nil {
			progress = append(progress, p)
		}
		if r := ev.GetReport(); r != nil {
			rep = r
		}
		if p := ev.GetPage(); p != nil {
			if rep == nil {
				t.Fatal("a page before the report")
			}
			pages = append(pages, p)
		}
	}
	// The report counts; it lists no object moved (the pages do).
	if rep == nil || rep.GetMovedCount() != uint32(len(names)) || len(rep.GetMoved()) != 0 || rep.GetFailedCount() != 0 ||
		!rep.GetStopping() || rep.GetOwner() != n1.Self().String() || rep.GetBulks() == 0 {
		t.Fatalf("report %v", rep)
	}
	var listed []string
	for i, p := range pages {
		for _, m := range p.GetMoved() {
			listed = append(listed, m.GetObject())
		}
		if p.GetLast() != (i == len(pages)-1) {
			t.Fatalf("page %d of %d: last=%v", i, len(pages), p.GetLast())
		}
	}
	slices.Sort(listed)
	if want := slices.Sorted(slices.Values(names)); !slices.Equal(listed, want) {
		t.Fatalf("pages list %v, want %v", listed, want)
	}
	last := progress[len(progress)-1]
	if progress[0].GetKind() != "started" || progress[0].GetRemaining() != uint32(len(names)) ||
		last.GetKind() != "progress" || last.GetMoved() != uint32(len(names)) || last.GetRemaining() != 0 {
		t.Fatalf("progress %v", progress)
	}
	select {
	case <-n1.StopRequested():
	case <-time.After(10 * time.Second):
		t.Fatal("the node was not asked to stop")
	}
	// stop_after=false: a second drain (nothing left) keeps it running.
	keep := false
	s, err = rpcpb.NewAdminServiceClient(conn).Drain(context.Background(), &pb.DrainRequest{StopAfter: &keep})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := s.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
		if r := ev.GetReport(); r != nil && (r.GetStopping() || r.GetMovedCount() != 0) {
			t.Fatalf("second drain report %v", r)
		}
	}
}

// Issue 6: a drain under load from 8 callers (half through gateways, half
// routing from etcd), then Stop: no call fails (callers retry with the same
// operation id within their deadline), every acknowledged append is present
// exactly once, every counter equals the sum of its acknowledged adds.
func TestDrainUnderLoad(t *testing.T) {
	m := startMesh(t, 1)
	const lists, counters, callers = 8, 8, 8
	var names []string
	for i := range lists {
		names = append(names, fmt.Sprintf("actor/list/u%d", i))
	}
	for i := range counters {
		names = append(names, fmt.Sprintf("actor/counter/u%d", i))
	}
	{
		c := newClient(t, client.Config{Etcd: m.etcd})
		for _, n := range names {
			if _, err := c.Call(context.Background(), n, readMethod(n)); err != nil {
				t.Fatal(err)
			}
		}
	}
	m.add(t, "n2")
	m.add(t, "n3")
	n1 := m.nodes[0]
	if n1.Hosted() != len(names) {
		t.Fatalf("n1 hosts %d of %d", n1.Hosted(), len(names))
	}
	gw := newClient(t, client.Config{Nodes: m.addrs()[1:]})
	direct := newClient(t, client.Config{Etcd: m.etcd})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var calls, retried, failed atomic.Int64
	acked := make([]map[string][]string, callers) // per caller: list -> values
	adds := make([]map[string]int64, callers)
	for w := range callers {
		acked[w], adds[w] = map[string][]string{}, map[string]int64{}
		wg.Go(func() {
			c := gw
			if w%2 == 0 {
				c = direct
			}
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				name := names[(w*7+k)%len(names)]
				method, arg := "append", fmt.Sprintf("w%d-%d", w, k)
				if strings.HasPrefix(name, "actor/counter/") {
					method, arg = "add", strconv.Itoa(1+k%5)
				}
				n, err := callRetrying(c, name, method, arg)
				calls.Add(1)
				retried.Add(int64(n))
				if err != nil {
					failed.Add(1)
					t.Errorf("%s %s %s: %v", name, method, arg, err)
					continue
				}
				if method == "append" {
					acked[w][name] = append(acked[w][name], arg)
				} else {
					v, _ := strconv.Atoi(arg)
					adds[w][name] += int64(v)
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	before := calls.Load()
	rep, err := n1.Drain(context.Background(), node.DrainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	if err := n1.Stop(sctx); err != nil {
		t.Error(err)
	}
	cancel()
	during := calls.Load() - before
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if len(rep.Moved) != len(names) || len(rep.Failed) != 0 {
		t.Fatalf("drain under load: moved %d, failed %+v", len(rep.Moved), rep.Failed)
	}
	if failed.Load() != 0 {
		t.Fatalf("%d calls failed", failed.Load())
	}
	for _, name := range names {
		if strings.HasPrefix(name, "actor/counter/") {
			var want int64
			for w := range callers {
				want += adds[w][name]
			}
			r, err := direct.Call(context.Background(), name, "get")
			if err != nil {
				t.Fatal(err)
			}
			if v := value(t, r); v != want {
				t.Errorf("%s = %d, acknowledged adds sum to %d", name, v, want)
			}
			continue
		}
		r, err := direct.Call(context.Background(), name, "read")
		if err != nil {
			t.Fatal(err)
		}
		var got struct{ Items []string }
		_ = json.Unmarshal(r.Payload, &got)
		seen := map[string]int{}
		for _, it := range got.Items {
			seen[it]++
		}
		total := 0
		for w := range callers {
			for _, v := range acked[w][name] {
				total++
				if seen[v] != 1 {
					t.Errorf("%s: acknowledged %s present %d times", name, v, seen[v])
				}
			}
		}
		if len(got.Items) != total {
			t.Errorf("%s: %d items, %d acknowledged", name, len(got.Items), total)
		}
	}
	t.Logf("%d calls (%d during the drain and stop, %d retries), 0 failed; drained %d objects in %v with %d relocations",
		calls.Load(), during, retried.Load(), len(rep.Moved), rep.Duration, rep.Relocations)
}

// readMethod reads a built-in counter (get) or list (read).
func readMethod(name string) string {
	if strings.HasPrefix(name, "actor/counter/") {
		return "get"
	}
	return "read"
}

// callRetrying calls with one operation id, retrying (the same id) what
// did not get an answer within 30 s; it returns the number of retries.
func callRetrying(c *client.Client, name, method, arg string) (int, error) {
	op := wire.NewOperationID()
	deadline := time.Now().Add(30 * time.Second)
	for retries := 0; ; retries++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.CallOp(ctx, op, name, method, [][]byte{[]byte(arg)})
		cancel()
		if err == nil {
			return retries, nil
		}
		var we *wire.Error
		if errors.As(err, &we) && !wire.Retryable(we.Code) && we.Code != pb.Code_CODE_DEADLINE_EXCEEDED {
			return retries, err
		}
		if time.Now().After(deadline) {
			return retries, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
