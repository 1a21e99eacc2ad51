//go:build failpoints

package node_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
)

// The answer of a message comes back while its sender is sealed for a
// move (message.after-send holds it): the source drops it (the seal reset
// the delivery), the target asks again, the destination answers from its
// reply table. The hop ran once, its answer reached OnReply once, on the
// sender's new owner.
func TestFaultMessageAnswerDuringMove(t *testing.T) {
	fm := startFaultMesh(t, 2)
	n1, n2 := fm.nodes[0], fm.nodes[1]
	c := newClient(t, client.Config{Nodes: fm.addrs(), Timeout: 30 * time.Second})
	ctx := context.Background()
	const sender, dest = "actor/bank/s", "actor/bank/d"
	readBankOf(t, c, sender)
	readBankOf(t, c, dest)
	fm.moveTo(t, sender, n1)
	fm.moveTo(t, dest, n2)
	arm(t, failpoint.MessageAfterSend, "sleep:1500ms@1")
	if _, err := c.Call(ctx, sender, "chain", "t1", "5", dest); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the hop executed at the destination", func() error {
		if v := readBankOf(t, c, dest); len(v.Hops) == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	// Its answer is held: the sender moves meanwhile.
	st, err := n1.Relocate(ctx, sender, node.RelocateOptions{Target: n2.Self().ID})
	if err != nil || st.GetOutcome() != "completed" {
		t.Fatalf("relocate the sender: %+v %v", st, err)
	}
	waitUntil(t, 20*time.Second, "the answer applied on the sender's new owner", func() error {
		if v := readBankOf(t, c, sender); len(v.Acks) == 0 {
			return errors.New("no answer yet")
		}
		return nil
	})
	time.Sleep(2 * time.Second) // the held answer has come back to the old copy by now: it must not count
	s, d := readBankOf(t, c, sender), readBankOf(t, c, dest)
	if len(s.Acks) != 1 || s.Acks[0] != "t1" || len(d.Hops) != 1 || s.Total+d.Total != 2*builtin.BankTotal {
		t.Fatalf("sender %+v, destination %+v: want the hop once and its answer once", s, d)
	}
	if hits := fm.metricSum(t, n2, "meshloc_dedup_hits_total", nil); hits < 1 {
		t.Errorf("the second ask was not answered from the destination's table (dedup hits %v)", hits)
	}
}

// Every second answer of a message is lost: each goes again with its id,
// and every hop of every chain still runs once, every answer is taken once.
func TestFaultMessageAnswersLost(t *testing.T) {
	fm := startFaultMesh(t, 3)
	c := newClient(t, client.Config{Nodes: fm.addrs(), Timeout: 30 * time.Second})
	ctx := context.Background()
	banks := []string{"actor/bank/l0", "actor/dbank/l1", "actor/bank/l2", "actor/dbank/l3"}
	for i, b := range banks {
		readBankOf(t, c, b)
		fm.moveTo(t, b, fm.nodes[i%3])
	}
	arm(t, failpoint.MessageAfterSend, "error%2")
	const chains = 10
	for i := range chains {
		if _, err := c.Call(ctx, banks[i%4], "chain", fmt.Sprintf("c%d", i), "1", banks[(i+1)%4], banks[(i+2)%4], banks[(i+3)%4]); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 30*time.Second, "every answer applied", func() error {
		acks := 0
		for _, b := range banks {
			acks += len(readBankOf(t, c, b).Acks)
		}
		if acks < 3*chains {
			return fmt.Errorf("%d of %d answers", acks, 3*chains)
		}
		return nil
	})
	var total int64
	for bi, b := range banks {
		v := readBankOf(t, c, b)
		total += v.Total
		for i := range chains {
			id := fmt.Sprintf("c%d", i)
			pos := (bi - i%4 + 4) % 4 // 0: the origin; 1..3: the hops, 3 the last
			if want := min(pos, 1); count(v.Hops, id) != want {
				t.Errorf("%s ran the hop of %s %d times, want %d", b, id, count(v.Hops, id), want)
			}
			if want := 1 - pos/3; count(v.Acks, id) != want { // the last bank sends nothing
				t.Errorf("%s took the answer of %s %d times, want %d", b, id, count(v.Acks, id), want)
			}
		}
	}
	if total != 4*builtin.BankTotal {
		t.Errorf("money not conserved: %d", total)
	}
}
