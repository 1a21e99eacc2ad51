package node_test

import (
	"context"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

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

// A source with --one-write-bulk=false (or moving to a node of an earlier
// version, whose descriptor does not take bulk intents) moves a bulk as
// before: an intent in every record, and no bulk intent in etcd. With the
// default, the records are written once and no intent is ever in them.
func TestRelocateManyEitherRule(t *testing.T) {
	for _, oneWrite := range []bool{false, true} {
		m := startMesh(t, 1, func(_ int, c *node.Config) { c.OneWriteBulk = oneWrite })
		c := newClient(t, client.Config{Etcd: m.etcd})
		names := activate(t, c, "actor/counter/e", 40)
		n2 := m.add(t, "n2")
		st := authority.New(m.etcd, keyspace.Default())
		before := readRec(t, st, names[0])
		// The history from the move's start: the writes of one record, and
		// the bulk intents.
		wctx, stop := context.WithCancel(context.Background())
		wch := m.etcd.Watch(wctx, keyspace.Default().Base(), clientv3.WithPrefix(), clientv3.WithRev(before.Revision+1))
		outs, err := m.nodes[0].RelocateMany(context.Background(), names, node.RelocateOptions{Target: "n2", Foreground: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range outs {
			if o.Outcome != "completed" {
				t.Fatalf("one-write %v: %s: %+v", oneWrite, o.Object, o)
			}
		}
		if n2.Hosted() != 40 {
			t.Fatalf("one-write %v: n2 hosts %d", oneWrite, n2.Hosted())
		}
		after := readRec(t, st, names[0])
		writes, bulkKeys, done := 0, 0, false
		for resp := range wch {
			for _, ev := range resp.Events {
				switch k := string(ev.Kv.Key); {
				case k == keyspace.Default().Authority(before.Object):
					writes++
					done = done || ev.Kv.ModRevision >= after.StoreVersion
				case strings.HasPrefix(k, keyspace.Default().RelocationsPrefix()) && strings.Contains(string(ev.Kv.Value), `"bulk-intent"`):
					bulkKeys++
				}
			}
			if done {
				break
			}
		}
		stop()
		if want := map[bool]int{false: 2, true: 1}[oneWrite]; writes != want || (bulkKeys > 0) != oneWrite {
			t.Errorf("one-write %v: %s written %d times (want %d), %d bulk intents", oneWrite, names[0], writes, want, bulkKeys)
		}
	}
}
