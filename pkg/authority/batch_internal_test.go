package authority

import (
	"context"
	"errors"
	"sync"
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
	if t.cmps == 0 && len(t.thens) > 0 && t.thens[0].IsTxn() {
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

func write(b *batcher, ctx context.Context) (*clientv3.TxnResponse, error) {
	return (&batchTxn{b: b, ctx: ctx}).If(clientv3.Compare(clientv3.Version("k"), "=", 0)).Then(clientv3.OpPut("k", "v")).Commit()
}

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
