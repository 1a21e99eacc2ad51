package authority

import (
	"context"
	"errors"
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func pending(n int) []pendingTxn {
	out := make([]pendingTxn, n)
	for i := range out {
		k := fmt.Sprint("m", keyN.Add(1))
		out[i] = pendingTxn{cmps: []clientv3.Cmp{clientv3.Compare(clientv3.Version(k), "=", 0)}, thens: []clientv3.Op{clientv3.OpPut(k, "v")}}
	}
	return out
}

// doMany's writes queue together behind a batch in flight and go as one
// batch, each with its own result; the caller sends that batch itself
// (its writes share one lead). Writes whose context ends while they wait
// are never sent (errNotSent) and leave the batcher idle.
func TestDoManyQueuesTogether(t *testing.T) {
	kv := &gateKV{entered: make(chan struct{}, 8), release: make(chan struct{})}
	b := &batcher{kv: kv, limits: DefaultLimits()}
	first := make(chan error, 1)
	go func() { _, err := write(b, context.Background()); first <- err }()
	<-kv.entered // in flight

	res := make(chan []batchResult, 1)
	go func() { res <- b.doMany(context.Background(), pending(3)) }()
	waitQueued(t, b, 3)
	kv.release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	<-kv.entered
	kv.release <- struct{}{}
	failed := 0
	for _, r := range <-res {
		if r.err != nil {
			t.Fatal(r.err)
		}
		if !r.resp.Succeeded {
			failed++
		}
	}
	if got := kv.batches(); len(got) != 2 || got[1] != 3 || failed != 1 {
		t.Fatalf("batches %v, %d failed; want [1 3] and the fake's one failure", got, failed)
	}
	if st := (BatchStats{Requests: b.requests.Load(), Writes: b.writes.Load()}); st.Requests != 2 || st.Writes != 4 {
		t.Fatalf("stats %+v, want 2 requests carrying 4 writes", st)
	}

	go func() { _, err := write(b, context.Background()); first <- err }()
	<-kv.entered
	ctx, cancel := context.WithCancel(context.Background())
	go func() { res <- b.doMany(ctx, pending(3)) }()
	waitQueued(t, b, 3)
	cancel()
	for _, r := range <-res {
		if !errors.Is(r.err, errNotSent) || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled while queued: %v", r.err)
		}
	}
	kv.release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.busy || len(b.queue) != 0 || len(kv.batches()) != 3 {
		t.Fatalf("after the cancel: busy=%v queue=%d batches %v", b.busy, len(b.queue), kv.batches())
	}
}
