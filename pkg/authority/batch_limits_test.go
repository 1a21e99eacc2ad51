package authority

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// refusalKV counts the transactions etcd refused for their number of
// operations, and the nested transactions of those it took.
type refusalKV struct {
	clientv3.KV
	tooMany, nested atomic.Int64
}

func (k *refusalKV) Txn(ctx context.Context) clientv3.Txn {
	return &refusalTxn{Txn: k.KV.Txn(ctx), k: k}
}

type refusalTxn struct {
	clientv3.Txn
	k      *refusalKV
	nested int
}

func (t *refusalTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		if op.IsTxn() {
			t.nested++
		}
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *refusalTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.Txn = t.Txn.If(cs...); return t }
func (t *refusalTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }
func (t *refusalTxn) Commit() (*clientv3.TxnResponse, error) {
	r, err := t.Txn.Commit()
	if errors.Is(err, rpctypes.ErrTooManyOps) {
		t.k.tooMany.Add(1)
	} else if err == nil {
		t.k.nested.Add(int64(t.nested))
	}
	return r, err
}

// etcd counts a nested transaction's operations against what its parent
// left (--max-txn-ops minus the parent's own): a batch of 127 intents,
// each of two compares and two puts, is refused by an etcd of the default
// 128. The batcher sizes its batches so that etcd takes them: 300 intents
// in flight together all land in shared requests, none refused whole.
func TestBatchWithinNestedLimit(t *testing.T) {
	srv := etcdtest.Single(t)
	c := etcdtest.Client(t, srv.Endpoint())
	kv := &refusalKV{KV: c.KV}
	s := New(c, keyspace.Default()).Batched(DefaultLimits())
	s.batch.kv = kv
	ctx := context.Background()
	lease, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := c.Put(ctx, s.keys.Owner("src"), "{}", clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	src := OwnerRef{ID: "src", Generation: ok.Header.Revision}
	dst := OwnerRef{ID: "dst", Generation: 1}
	const n = 300
	seen := make([]Snapshot, n)
	for i := range n {
		res, err := s.Activate(ctx, ActivateRequest{Object: keyspace.Actor("counter", fmt.Sprintf("o%d", i)), Owner: src, Node: NodeRef{RoutingID: "00", Address: "a:1"}})
		if err != nil || !res.Won {
			t.Fatal(res, err)
		}
		seen[i] = res.Snapshot
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			w, err := s.Intend(ctx, IntentRequest{Seen: seen[i], Source: src, LeaseID: lease.ID,
				Intent: Intent{RelocationID: fmt.Sprintf("r%d", i), Target: dst, TargetNode: NodeRef{RoutingID: "01", Address: "b:1"}, DeadlineMs: 1, NonceHash: "00"}})
			if err != nil || !w.Written {
				t.Errorf("intent %d: %+v %v", i, w, err)
			}
		})
	}
	wg.Wait()
	if k := kv.tooMany.Load(); k != 0 {
		t.Errorf("etcd refused %d batches for their operations", k)
	}
	if k := kv.nested.Load(); k < n/2 {
		t.Errorf("only %d of %d intents went in batches", k, n)
	}
}
