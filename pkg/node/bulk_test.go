package node_test

import (
	"context"
	"testing"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// RelocateMany moves 300 counters to one target in bulk moves: each its
// own relocation (its own id), its state and its record the target's. A
// group, a group's member and an object not hosted here are refused alone,
// nothing written for them; the rest go on.
func TestRelocateManyKeepsState(t *testing.T) {
	m := startMesh(t, 1)
	c := newClient(t, client.Config{Etcd: m.etcd})
	names := activate(t, c, "actor/counter/m", 300)
	n1 := m.nodes[0]
	makeGroup(t, n1, "group/mg", "actor/counter/mg0")
	n2 := m.add(t, "n2")
	st := authority.New(m.etcd, keyspace.Default())
	before := readRec(t, st, "actor/counter/mg0")
	ask := append([]string{"group/mg", "actor/counter/mg0", "actor/counter/nowhere"}, names...)
	outs, err := n1.RelocateMany(context.Background(), ask, node.RelocateOptions{Target: "n2", Foreground: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for i, o := range outs {
		if o.Object != ask[i] {
			t.Fatalf("outcome %d is %s's, want %s's", i, o.Object, ask[i])
		}
		if i < 3 {
			if o.Outcome != node.OutcomeRefused || o.Code == pb.Code_CODE_OK {
				t.Errorf("%s: %+v, want refused", o.Object, o)
			}
			continue
		}
		if o.Outcome != "completed" || ids[o.ID.String()] {
			t.Errorf("%s: %+v (its id seen before: %v)", o.Object, o, ids[o.ID.String()])
		}
		ids[o.ID.String()] = true
	}
	if after := readRec(t, st, "actor/counter/mg0"); after.StoreVersion != before.StoreVersion {
		t.Errorf("a refused member's record was written: %+v", after)
	}
	if n2.Hosted() != 300 || n1.Hosted() != 1 { // n1 keeps the group's member
		t.Errorf("n1 hosts %d, n2 %d", n1.Hosted(), n2.Hosted())
	}
	for i, name := range names {
		if r := readRec(t, st, name); r.Record.Owner != n2.Self() || r.Record.AuthorityGeneration != 2 {
			t.Errorf("%s: %+v", name, r.Record)
		}
		r, err := c.Call(context.Background(), name, "get")
		if err != nil || value(t, r) != int64(i+1) || r.Node != "n2" {
			t.Fatalf("%s: %v %v on %s, want %d on n2", name, r, err, r.Node, i+1)
		}
	}
	if _, err := n1.RelocateMany(context.Background(), []string{names[0], names[0]}, node.RelocateOptions{Target: "n2"}); err == nil {
		t.Error("an object named twice was taken")
	}
	if _, err := n1.RelocateMany(context.Background(), nil, node.RelocateOptions{}); err == nil {
		t.Error("no objects was taken")
	}
}
