package authority

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// gateKV answers each Txn once the test lets it go, and records how many
// writes each carried (nested transactions, or 1).
type gateKV struct {
	clientv3.KV
	mu      sync.Mutex
	sizes   []int
	entered chan struct{}
	release chan struct{}
}

func (k *gateKV) Txn(context.Context) clientv3.Txn { return &gateTxn{k: k} }

type gateTxn struct {
	k     *gateKV
	cmps  int
	thens []clientv3.Op
}

func (t *gateTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.cmps += len(cs); return t }
func (t *gateTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.thens = append(t.thens, ops...)
	return t
}
func (t *gateTxn) Else(...clientv3.Op) clientv3.Txn { return t }
func (t *gateTxn) Commit() (*clientv3.TxnResponse, error) {
	n := 1
	resp := &clientv3.TxnResponse{Header: &pb.ResponseHeader{Revision: 7}, Succeeded: true}
	if len(t.thens) > 0 && t.thens[0].IsTxn() { // a batch (its shared compares hoisted)
		n = len(t.thens)
		for i := range t.thens {
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{
				ResponseTxn: &pb.TxnResponse{Succeeded: i != 1}}})
		}
	}
	t.k.mu.Lock()
	t.k.sizes = append(t.k.sizes, n)
	t.k.mu.Unlock()
	t.k.entered <- struct{}{}
	<-t.k.release
	return resp, nil
}

func (k *gateKV) batches() []int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]int(nil), k.sizes...)
}

// write is a write of a key of its own (writes of one key never share a
// batch: TestBatchKeepsKeysApart).
func write(b *batcher, ctx context.Context) (*clientv3.TxnResponse, error) {
	k := fmt.Sprint("k", keyN.Add(1))
	return (&batchTxn{b: b, ctx: ctx}).If(clientv3.Compare(clientv3.Version(k), "=", 0)).Then(clientv3.OpPut(k, "v")).Commit()
}

var keyN atomic.Int64

// The first write goes alone at once; the writes that come while it is in
// flight go together next, each with its own outcome; a write whose
// context ends while it waits is never sent and holds nothing up.
func TestBatcherGathersWhileInFlight(t *testing.T) {
	kv := &gateKV{entered: make(chan struct{}, 8), release: make(chan struct{})}
	b := &batcher{kv: kv, limits: DefaultLimits()}
	type out struct {
		resp *clientv3.TxnResponse
		err  error
	}
	res := make([]chan out, 5)
	start := func(i int, ctx context.Context) {
		res[i] = make(chan out, 1)
		go func() { r, err := write(b, ctx); res[i] <- out{r, err} }()
	}
	start(0, context.Background())
	<-kv.entered // the first is in flight
	cctx, cancel := context.WithCancel(context.Background())
	start(1, cctx)
	for i := 2; i < 5; i++ {
		start(i, context.Background())
	}
	waitQueued(t, b, 4)
	cancel()
	if r := <-res[1]; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled while queued: %v", r.err)
	}
	kv.release <- struct{}{}
	if r := <-res[0]; r.err != nil || !r.resp.Succeeded {
		t.Fatalf("first: %+v", r)
	}
	<-kv.entered
	kv.release <- struct{}{}
	failed := 0 // the fake fails the second write of a batch: each gets its own outcome
	for i := 2; i < 5; i++ {
		r := <-res[i]
		if r.err != nil || r.resp.Header.GetRevision() != 7 {
			t.Fatalf("write %d: %+v %v", i, r.resp, r.err)
		}
		if !r.resp.Succeeded {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d writes of the batch failed, want 1", failed)
	}
	if got := kv.batches(); len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Fatalf("batches %v, want [1 3]", got)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.busy || len(b.queue) != 0 {
		t.Fatalf("idle batcher busy=%v queue=%d", b.busy, len(b.queue))
	}
}

func waitQueued(t *testing.T, b *batcher, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		q := len(b.queue)
		b.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Writes that touch a key another write of the batch writes go in a later
// batch, in order (etcd evaluates every nested compare before any write,
// and takes a put and a later delete of one key in one batch); writes that
// only compare a key in common share a batch.
func TestBatchKeepsKeysApart(t *testing.T) {
	kv := &gateKV{entered: make(chan struct{}, 8), release: make(chan struct{})}
	b := &batcher{kv: kv, limits: DefaultLimits()}
	owner := clientv3.Compare(clientv3.CreateRevision("owner"), "=", 5) // every write reads it
	rec := clientv3.Compare(clientv3.ModRevision("rec"), "=", 9)
	txns := []*batchTxn{
		{cmps: []clientv3.Cmp{owner}, thens: []clientv3.Op{clientv3.OpPut("first", "")}},                    // in flight first
		{cmps: []clientv3.Cmp{owner, rec}, thens: []clientv3.Op{clientv3.OpPut("rec", "intent")}},           // batch 2
		{cmps: []clientv3.Cmp{owner, rec}, thens: []clientv3.Op{clientv3.OpDelete("rec")}},                  // batch 3: writes rec
		{cmps: []clientv3.Cmp{owner}, thens: []clientv3.Op{clientv3.OpPut("other", "")}},                    // batch 2
		{cmps: []clientv3.Cmp{owner}, thens: []clientv3.Op{clientv3.OpDelete("re", clientv3.WithPrefix())}}, // batch 3: its range holds rec
		{cmps: []clientv3.Cmp{owner}, thens: []clientv3.Op{clientv3.OpGet("other")}},                        // batch 3: reads other
	}
	done := make(chan struct{}, len(txns))
	start := func(i int) {
		tx := txns[i]
		tx.b, tx.ctx = b, context.Background()
		go func() { _, _ = tx.Commit(); done <- struct{}{} }()
	}
	start(0)
	<-kv.entered
	for i := 1; i < len(txns); i++ {
		start(i)
		waitQueued(t, b, i)
	}
	for i := range 4 {
		kv.release <- struct{}{}
		if i < 3 {
			<-kv.entered // the next batch is in flight
		}
	}
	for range txns {
		<-done
	}
	if got := kv.batches(); fmt.Sprint(got) != "[1 2 2 1]" {
		t.Fatalf("batches %v, want [1 2 2 1]", got)
	}
	for _, c := range []struct {
		a, b keySpan
		want bool
	}{
		{span([]byte("a"), nil), span([]byte("a"), nil), true},
		{span([]byte("a"), nil), span([]byte("a\x00"), nil), false},
		{span([]byte("a"), []byte("b")), span([]byte("ab"), nil), true},
		{span([]byte("a"), []byte("b")), span([]byte("b"), nil), false},
		{span([]byte("c"), []byte{0}), span([]byte("zz"), nil), true},
		{span([]byte("c"), []byte{0}), span([]byte("b"), nil), false},
	} {
		if got := c.a.meets(c.b); got != c.want || c.b.meets(c.a) != c.want {
			t.Errorf("%q..%q meets %q..%q: %v, want %v", c.a.start, c.a.end, c.b.start, c.b.end, got, c.want)
		}
	}
}

// A batch's key index answers as the pairwise check would: single keys and
// ranges, on either side, read or written.
func TestBatchKeysIndex(t *testing.T) {
	put := func(k string) clientv3.Op { return clientv3.OpPut(k, "") }
	read := func(k string) clientv3.Cmp { return clientv3.Compare(clientv3.ModRevision(k), "=", 1) }
	w := func(cmps []clientv3.Cmp, ops ...clientv3.Op) *batchWrite { return &batchWrite{cmps: cmps, thens: ops} }
	var k batchKeys
	k.add(w([]clientv3.Cmp{read("owner"), read("rec/a")}, put("rec/a")))
	k.add(w(nil, clientv3.OpDelete("zone/", clientv3.WithPrefix())))
	for _, c := range []struct {
		name string
		w    *batchWrite
		want bool
	}{
		{"reads what the batch reads", w([]clientv3.Cmp{read("owner")}, put("rec/b")), false},
		{"writes what the batch reads", w(nil, put("owner")), true},
		{"reads what the batch writes", w([]clientv3.Cmp{read("rec/a")}, put("rec/c")), true},
		{"writes into the batch's range", w(nil, put("zone/x")), true},
		{"reads into the batch's range", w(nil, clientv3.OpGet("zone/y")), true},
		{"a range over a written key", w(nil, clientv3.OpGet("rec/", clientv3.WithPrefix())), true},
		{"a range over a read key only", w(nil, clientv3.OpGet("own", clientv3.WithPrefix())), false},
		{"a range writing over a read key", w(nil, clientv3.OpDelete("own", clientv3.WithPrefix())), true},
		{"next to the range", w(nil, put("zone0")), false},
		{"every key from", w(nil, clientv3.OpGet("s", clientv3.WithFromKey())), true},
	} {
		if got := k.meets(c.w); got != c.want {
			t.Errorf("%s: meets %v, want %v", c.name, got, c.want)
		}
	}
	k.reset()
	if k.meets(w(nil, put("owner"))) {
		t.Error("a reset index still holds keys")
	}
}

// TestHoist: only the compares every write carries are hoisted, wherever
// each write has them; the others stay with their writes.
func TestHoist(t *testing.T) {
	owner := clientv3.Compare(clientv3.CreateRevision("o"), "=", 7)
	fence := func(rev int64) clientv3.Cmp { return clientv3.Compare(clientv3.ModRevision("f"), "=", rev) }
	rec := func(k string) clientv3.Cmp { return clientv3.Compare(clientv3.Value(k), "=", "v") }
	w := func(cs ...clientv3.Cmp) *batchWrite { return &batchWrite{cmps: cs} }

	if s, r := hoist([]*batchWrite{w(owner, fence(1))}); s != nil || r != nil {
		t.Fatalf("a write alone: %v %v", s, r)
	}
	batch := []*batchWrite{w(rec("a"), owner, fence(1)), w(fence(1), rec("b"), owner), w(owner, rec("c"), fence(2))}
	shared, rest := hoist(batch)
	if len(shared) != 1 || !sameCmp(shared[0].GetCompare(), owner.GetCompare()) {
		t.Fatalf("shared %v, want the owner's compare only", shared)
	}
	want := [][]clientv3.Cmp{{rec("a"), fence(1)}, {fence(1), rec("b")}, {rec("c"), fence(2)}}
	for i := range batch {
		if len(rest[i]) != len(want[i]) {
			t.Fatalf("write %d keeps %v, want %v", i, rest[i], want[i])
		}
		for j := range want[i] {
			if !sameCmp(rest[i][j].GetCompare(), want[i][j].GetCompare()) {
				t.Fatalf("write %d keeps %v, want %v", i, rest[i], want[i])
			}
		}
	}
	if s, r := hoist([]*batchWrite{w(rec("a")), w(rec("b"))}); s != nil || r != nil {
		t.Fatalf("nothing shared: %v %v", s, r)
	}
}
