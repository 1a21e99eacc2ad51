package node_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// panicky is a counter whose code panics on demand: "boom" always, and
// its snapshot while it holds 13.
type panicky struct{ v int64 }

func (p *panicky) Handle(_ actor.Context, method string, args [][]byte) ([]byte, error) {
	switch method {
	case "add":
		p.v++
		return []byte(strconv.FormatInt(p.v, 10)), nil
	case "boom":
		p.v += 100 // a change the panic leaves behind
		var m map[string]int
		m["x"] = 1 // assignment to a nil map: a runtime panic
	}
	return nil, actor.UnknownMethod("panicky", method)
}

func (p *panicky) Snapshot() ([]byte, error) {
	if p.v == 13 {
		panic("snapshot of 13")
	}
	return []byte(strconv.FormatInt(p.v, 10)), nil
}

func (p *panicky) Restore(b []byte) error {
	v, err := strconv.ParseInt(string(b), 10, 64)
	p.v = v
	return err
}

func panickyMesh(t *testing.T, n int) *mesh {
	t.Helper()
	srv := etcdtest.Single(t)
	m := &mesh{etcd: etcdtest.Client(t, srv.Endpoint()), ep: srv.Endpoint()}
	for _, d := range []bool{false, true} {
		name := "panicky"
		if d {
			name = "dpanicky"
		}
		m.types = append(m.types, actor.Type{Name: name, Durable: d, Methods: []string{"add", "boom"},
			New: func() actor.Object { return &panicky{} }})
	}
	for i := range n {
		m.add(t, "n"+strconv.Itoa(i+1))
	}
	return m
}

// An object's handler panics: that call is answered internal (once: a
// retry with its operation id gets the recorded answer), the node goes on
// serving it and every other object, and the panic is counted. A memory
// object keeps what the handler left; a durable one is re-activated from
// etcd, so its panicked call changed nothing.
func TestHandlerPanicIsTheCallsError(t *testing.T) {
	m := panickyMesh(t, 1)
	c := newClient(t, client.Config{Etcd: m.etcd})
	ctx := context.Background()
	n := m.nodes[0]
	for _, tc := range []struct {
		name  string
		after string // add's reply after one add, a boom, an add
	}{{"actor/panicky/p", "102"}, {"actor/dpanicky/p", "2"}} {
		if _, err := c.Call(ctx, tc.name, "add"); err != nil {
			t.Fatal(err)
		}
		op := wire.NewOperationID()
		_, err := c.CallOp(ctx, op, tc.name, "boom", nil)
		var werr *wire.Error
		if !errors.As(err, &werr) || werr.Code != pb.Code_CODE_INTERNAL {
			t.Fatalf("%s boom: %v, want internal", tc.name, err)
		}
		if tc.name == "actor/panicky/p" {
			_, err = c.CallOp(ctx, op, tc.name, "boom", nil)
			if !errors.As(err, &werr) || werr.Code != pb.Code_CODE_INTERNAL {
				t.Fatalf("%s boom again: %v, want the recorded internal", tc.name, err)
			}
		}
		r, err := c.Call(ctx, tc.name, "add")
		if err != nil || string(r.Payload) != tc.after {
			t.Fatalf("%s add after the panic: %v %v, want %s", tc.name, r, err, tc.after)
		}
	}
	if _, err := c.Call(ctx, "actor/counter/other", "add", "1"); err != nil {
		t.Fatalf("another object after the panics: %v", err)
	}
	if got := m.metric(t, n, "meshloc_object_panics_total"); got != 2 {
		t.Fatalf("panics counted %v, want 2 (the retry was answered from the table)", got)
	}
}

// The object's snapshot panics when a relocation captures it: the
// relocation fails before the state left, the object serves on at the
// source, and the next relocation (its state changed) moves it.
func TestSnapshotPanicFailsTheRelocation(t *testing.T) {
	m := panickyMesh(t, 2)
	c := newClient(t, client.Config{Etcd: m.etcd})
	ctx := context.Background()
	const name = "actor/panicky/s"
	for range 13 {
		if _, err := c.Call(ctx, name, "add"); err != nil {
			t.Fatal(err)
		}
	}
	src := m.owner(t, name)
	st, err := src.Relocate(ctx, name, node.RelocateOptions{})
	if err == nil && st.GetOutcome() == "completed" {
		t.Fatalf("relocation of a state whose snapshot panics completed: %v", st)
	}
	if m.owner(t, name) != src {
		t.Fatal("the object moved")
	}
	r, err := c.Call(ctx, name, "add")
	if err != nil || string(r.Payload) != "14" {
		t.Fatalf("add after the failed relocation: %v %v", r, err)
	}
	if st, err := src.Relocate(ctx, name, node.RelocateOptions{}); err != nil || st.GetOutcome() != "completed" {
		t.Fatalf("relocation after: %v %v", st, err)
	}
	if r, err := c.Call(ctx, name, "add"); err != nil || string(r.Payload) != "15" {
		t.Fatalf("add after the move: %v %v", r, err)
	}
	if got := m.metric(t, src, "meshloc_object_panics_total"); got < 1 {
		t.Fatalf("panics counted %v", got)
	}
}
