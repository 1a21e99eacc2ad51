package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

func (m *mesh) owner(t testing.TB, name string) *node.Node {
	t.Helper()
	obj, _ := keyspace.ParseObject(name)
	snap, err := authority.New(m.etcd, keyspace.Default()).Read(context.Background(), obj)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range m.nodes {
		if n.Self() == snap.Record.Owner {
			return n
		}
	}
	t.Fatalf("owner %v of %s is not in the mesh", snap.Record.Owner, name)
	return nil
}

func TestRelocateOne(t *testing.T) {
	m := startMesh(t, 2)
	c := newClient(t, client.Config{Etcd: m.etcd})
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		if _, err := c.Call(ctx, "actor/counter/r", "add", "1"); err != nil {
			t.Fatal(err)
		}
	}
	src := m.owner(t, "actor/counter/r")
	st, err := src.Relocate(ctx, "actor/counter/r", node.RelocateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetOutcome() != "completed" {
		t.Fatalf("relocation %+v", st)
	}
	dst := m.owner(t, "actor/counter/r")
	if dst == src {
		t.Fatal("owner did not change")
	}
	r, err := c.Call(ctx, "actor/counter/r", "add", "1")
	if err != nil {
		t.Fatal(err)
	}
	if v := value(t, r); v != 4 {
		t.Fatalf("after the move: %d, want 4", v)
	}
	if r.Fence.AuthorityGeneration != 2 || r.Fence.Owner != dst.Self() {
		t.Fatalf("fence %+v", r.Fence)
	}
	// Both sides say when the object stopped serving and when it served
	// again: the source its seal, the target its admission, and the
	// target's interruption is the time between (one clock here).
	var tst *pb.RelocationStatus
	for _, x := range dst.Relocations() {
		if x.GetRole() == "target" && string(x.GetRelocationId()) == string(st.GetRelocationId()) {
			tst = x
		}
	}
	if tst == nil || st.GetSealedUnixUs() == 0 || tst.GetAdmittedUnixUs() < st.GetSealedUnixUs() ||
		tst.GetInterruptionUs() != tst.GetAdmittedUnixUs()-st.GetSealedUnixUs() {
		t.Fatalf("source %+v, target %+v", st, tst)
	}
	t.Logf("interruption %dµs to the target's admission, %dµs to the source's OUTCOME, payload %d bytes", tst.GetInterruptionUs(), st.GetInterruptionUs(), st.GetPayloadBytes())
}

// Callers keep calling while the object moves back and forth: every
// acknowledged append is present exactly once, in order.
func TestRelocateUnderLoad(t *testing.T) {
	m := startMesh(t, 3)
	ctx := context.Background()
	c := newClient(t, client.Config{Nodes: m.addrs()})
	direct := newClient(t, client.Config{Etcd: m.etcd})
	const lists = 4
	for i := range lists {
		if _, err := c.Call(ctx, fmt.Sprintf("actor/list/l%d", i), "read"); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	acked := make([][]string, lists)
	var calls atomic.Int64
	for i := range lists {
		wg.Go(func() {
			cl := c
			if i%2 == 0 {
				cl = direct
			}
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				v := fmt.Sprintf("%d", k)
				if _, err := cl.Call(ctx, fmt.Sprintf("actor/list/l%d", i), "append", v); err != nil {
					t.Errorf("append l%d %s: %v", i, v, err)
					return
				}
				acked[i] = append(acked[i], v)
				calls.Add(1)
			}
		})
	}
	var done, other atomic.Int64
	for round := range 40 {
		name := fmt.Sprintf("actor/list/l%d", round%lists)
		src := m.owner(t, name)
		st, err := src.Relocate(ctx, name, node.RelocateOptions{})
		if err != nil {
			t.Fatalf("relocate %s: %v", name, err)
		}
		if st.GetOutcome() == "completed" {
			done.Add(1)
		} else {
			other.Add(1)
			t.Logf("relocation %s: %s %s", name, st.GetOutcome(), st.GetMessage())
		}
	}
	close(stop)
	wg.Wait()
	for i := range lists {
		r, err := direct.Call(ctx, fmt.Sprintf("actor/list/l%d", i), "read")
		if err != nil {
			t.Fatal(err)
		}
		var got struct{ Items []string }
		_ = json.Unmarshal(r.Payload, &got)
		if len(got.Items) != len(acked[i]) {
			t.Fatalf("l%d: %d items, %d acknowledged", i, len(got.Items), len(acked[i]))
		}
		for k := range got.Items {
			if got.Items[k] != acked[i][k] {
				t.Fatalf("l%d item %d: %s, acknowledged %s", i, k, got.Items[k], acked[i][k])
			}
		}
	}
	t.Logf("%d calls, %d relocations completed, %d other", calls.Load(), done.Load(), other.Load())
	_ = time.Second
}
