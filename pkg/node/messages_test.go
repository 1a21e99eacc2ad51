package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/tcpproxy"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// bankView is a bank's read reply (pkg/actor/builtin bank).
type bankView struct {
	Balances map[string]int64
	Total    int64
	Sent     int64
	Received int64
	Hops     []string
	Acks     []string
}

func readBankOf(t testing.TB, c *client.Client, obj string) bankView {
	t.Helper()
	r, err := c.Call(context.Background(), obj, "read")
	if err != nil {
		t.Fatalf("read %s: %v", obj, err)
	}
	var v bankView
	if err := json.Unmarshal(r.Payload, &v); err != nil {
		t.Fatalf("read %s: %s: %v", obj, r.Payload, err)
	}
	return v
}

func count(xs []string, x string) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}

// Chains of transfers by message (A asks B, B asks C, …) between banks on
// three nodes while the banks keep relocating: every hop runs exactly once
// (each bank lists each chain it was on once), every answer comes back to
// its sender's OnReply exactly once, and the money is conserved. The
// execution logs name each message's sender, and each OnReply turn the
// message it answered.
func TestMessageChainsWhileRelocating(t *testing.T) {
	dir := t.TempDir()
	m := startMesh(t, 3, func(i int, c *node.Config) { c.ExecLog = filepath.Join(dir, fmt.Sprintf("n%d.jsonl", i+1)) })
	c := newClient(t, client.Config{Nodes: m.addrs(), Timeout: 30 * time.Second})
	ctx := context.Background()
	const banks, chains = 6, 24
	names := make([]string, banks)
	for i := range names {
		names[i] = fmt.Sprintf("actor/bank/m%d", i)
		if i%2 == 1 {
			names[i] = fmt.Sprintf("actor/dbank/m%d", i)
		}
		readBankOf(t, c, names[i]) // activate
	}
	stop := make(chan struct{})
	var storm sync.WaitGroup
	storm.Go(func() {
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			default:
			}
			obj := names[rng.IntN(banks)]
			for _, n := range m.nodes { // the owner relocates it; the others refuse
				if _, err := n.Relocate(ctx, obj, node.RelocateOptions{}); err == nil {
					break
				}
			}
		}
	})
	type chain struct {
		id   string
		path []string // the origin, then the hops
	}
	var made []chain
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range chains {
		perm := rng.Perm(banks)[:2+rng.IntN(3)]
		ch := chain{id: fmt.Sprintf("c%d", i)}
		for _, p := range perm {
			ch.path = append(ch.path, names[p])
		}
		args := append([]string{ch.id, "3"}, ch.path[1:]...)
		if _, err := c.Call(ctx, ch.path[0], "chain", args...); err != nil {
			t.Fatalf("chain %v: %v", ch, err)
		}
		made = append(made, ch)
	}
	waitUntil(t, 60*time.Second, "every chain delivered and acknowledged", func() error {
		acks := 0
		for _, n := range names {
			acks += len(readBankOf(t, c, n).Acks)
		}
		want := 0
		for _, ch := range made {
			want += len(ch.path) - 1
		}
		if acks < want {
			return fmt.Errorf("%d of %d answers applied", acks, want)
		}
		return nil
	})
	close(stop)
	storm.Wait()

	views := map[string]bankView{}
	var total int64
	for _, n := range names {
		v := readBankOf(t, c, n)
		views[n] = v
		total += v.Total
	}
	if total != banks*builtin.BankTotal {
		t.Errorf("money not conserved: %d, want %d", total, banks*builtin.BankTotal)
	}
	for _, ch := range made {
		for i, b := range ch.path {
			if i > 0 && count(views[b].Hops, ch.id) != 1 {
				t.Errorf("chain %s: %s executed its hop %d times", ch.id, b, count(views[b].Hops, ch.id))
			}
			if i < len(ch.path)-1 && count(views[b].Acks, ch.id) != 1 {
				t.Errorf("chain %s: %s took the answer of its hop %d times (acks %v)", ch.id, b, count(views[b].Acks, ch.id), views[b].Acks)
			}
		}
	}
	// The execution logs: one line per message execution, with its sender;
	// one per OnReply turn, naming its message; no operation id twice.
	seen := map[string]int{}
	froms, replies := 0, 0
	for i := range 3 {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("n%d.jsonl", i+1)))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var l struct{ Op, From, ReplyTo string }
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("exec log line %q: %v", sc.Text(), err)
			}
			if l.Op != "" {
				seen[l.Op]++
			}
			if l.From != "" {
				froms++
			}
			if l.ReplyTo != "" {
				replies++
			}
		}
		f.Close()
	}
	hops := 0
	for _, ch := range made {
		hops += len(ch.path) - 1
	}
	if froms != hops || replies != hops {
		t.Errorf("exec logs: %d message executions and %d OnReply turns, want %d each", froms, replies, hops)
	}
	for op, k := range seen {
		if k > 1 {
			t.Errorf("operation %s executed %d times", op, k)
		}
	}
}

// A durable sender's outbox is persisted with its state: its owner is cut
// off from etcd (as after kill -9) while the message cannot be delivered
// (no node hosts the destination's type); the sender is re-activated on
// another node from etcd, and once a node hosts the destination again the
// message arrives, once, and its answer reaches the sender's OnReply once.
func TestDurableOutboxSurvivesOwnerCrash(t *testing.T) {
	m, px := cuttableMesh(t)
	only := func(types ...string) func(int, *node.Config) { return func(_ int, c *node.Config) { c.Types = types } }
	n1 := m.addCut(t, px, "n1", only(builtin.DurableBankType))
	n2 := m.add(t, "n2", only(builtin.DurableBankType))
	ctx := context.Background()
	c := newClient(t, client.Config{Nodes: []string{n2.Address()}, Timeout: 30 * time.Second})
	const sender, dest = "actor/dbank/s", "actor/bank/d"
	readBankOf(t, c, sender)
	m.moveTo(t, sender, n1)
	// No node hosts "bank": the message waits in the outbox, persisted.
	if _, err := c.Call(ctx, sender, "chain", "t1", "10", dest); err != nil {
		t.Fatal(err)
	}
	if st := m.persisted(t, sender); len(st.Value.Outbox) == 0 {
		t.Fatal("the message is not persisted with the sender's state")
	}
	px.SetMode(tcpproxy.Blackhole)
	waitFencedAndGone(ctx, t, m, n1)
	// Re-activated on n2 from etcd: the outbox came back with the state.
	if v := readBankOf(t, c, sender); v.Sent != 10 || len(v.Acks) != 0 {
		t.Fatalf("the sender after the crash: %+v", v)
	}
	m.add(t, "n3", only(builtin.BankType))
	waitUntil(t, 30*time.Second, "the answer applied at the sender", func() error {
		if v := readBankOf(t, c, sender); len(v.Acks) == 0 {
			return errors.New("no answer yet")
		}
		return nil
	})
	s, d := readBankOf(t, c, sender), readBankOf(t, c, dest)
	if len(s.Acks) != 1 || s.Acks[0] != "t1" || d.Received != 10 || len(d.Hops) != 1 || s.Total+d.Total != 2*builtin.BankTotal {
		t.Fatalf("after the delivery: sender %+v, destination %+v", s, d)
	}
	if st := m.persisted(t, sender); len(st.Value.Outbox) != 0 {
		t.Fatalf("the answered message is still persisted: %x", st.Value.Outbox)
	}
}

// An outbox holds --outbox-messages; a Send beyond is refused with
// resource_exhausted and nothing changes (a retry runs again later). A
// message that gets no answer for twice the de-duplication window is
// refused for good: counted, and its sender's OnReply gets
// ErrMessageExpired.
func TestOutboxBoundAndExpiry(t *testing.T) {
	m := startMesh(t, 2, func(_ int, c *node.Config) {
		c.Types = []string{builtin.BankType}
		c.OutboxMessages = 2
		c.DedupWindow = time.Second
	})
	c := newClient(t, client.Config{Nodes: m.addrs(), Timeout: 30 * time.Second})
	ctx := context.Background()
	const sender, nowhere = "actor/bank/s", "actor/dbank/nowhere" // no node hosts dbank
	for i := 1; i <= 2; i++ {
		if _, err := c.Call(ctx, sender, "chain", fmt.Sprintf("t%d", i), "1", nowhere); err != nil {
			t.Fatal(err)
		}
	}
	op := wire.NewOperationID()
	_, err := c.CallOp(ctx, op, sender, "chain", [][]byte{[]byte("t3"), []byte("1"), []byte(nowhere)})
	if code := wire.CodeOf(err); code != pb.Code_CODE_RESOURCE_EXHAUSTED {
		t.Fatalf("a third message: %v (%s), want resource_exhausted", err, code)
	}
	waitUntil(t, 30*time.Second, "both messages given up", func() error {
		if v := readBankOf(t, c, sender); len(v.Acks) < 2 {
			return fmt.Errorf("acks %v", v.Acks)
		}
		return nil
	})
	v := readBankOf(t, c, sender)
	for _, a := range v.Acks {
		if !strings.HasSuffix(a, "!operation_expired") {
			t.Errorf("ack %q, want an expired answer", a)
		}
	}
	// The refused call changed nothing: t3 is a new transfer id still.
	if _, err := c.Call(ctx, sender, "chain", "t3", "1", nowhere); err != nil {
		t.Fatalf("the refused chain, again, with room: %v", err)
	}
	owner := m.owner(t, sender)
	if got := m.metric(t, owner, "meshloc_messages_refused_total"); got < 2 {
		t.Errorf("meshloc_messages_refused_total %v on the sender's node, want ≥ 2", got)
	}
}

// actor.ErrOutboxFull carries its code, so handlers can pass it on.
func TestOutboxFullCode(t *testing.T) {
	if c := wire.CodeOf(actor.ErrOutboxFull); c != pb.Code_CODE_RESOURCE_EXHAUSTED {
		t.Fatal(c)
	}
}
