package authority

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Batched local reads: the serializable reads of one Store in flight
// (a delete's first look, a first call to a name seen asleep) share one
// etcd request, a read-only transaction of serializable gets, which the
// local member answers without a raft round and at one revision. They
// queue and hand over as the writes do (batch.go): a read that finds no
// batch in flight goes at once; those that come meanwhile go together in
// the next.

// readLocal gets key from the local member: through the read batcher
// when the Store is batched.
func (s *Store) readLocal(ctx context.Context, key string) (*clientv3.GetResponse, error) {
	if s.reads == nil {
		return s.c.Get(ctx, key, clientv3.WithSerializable())
	}
	w := &batchWrite{thens: []clientv3.Op{clientv3.OpGet(key, clientv3.WithSerializable())},
		done: make(chan batchResult, 1), lead: make(chan struct{}, 1), queued: true}
	w.size = opsSize(w.thens)
	resp, err := s.reads.do(ctx, w)
	if err != nil {
		return nil, err
	}
	if len(resp.Responses) != 1 || resp.Responses[0].GetResponseRange() == nil {
		return nil, fmt.Errorf("authority: a batched read of %s answered %d responses", key, len(resp.Responses))
	}
	r := (*clientv3.GetResponse)(resp.Responses[0].GetResponseRange())
	r.Header = resp.Header
	return r, nil
}

// commitReads sends a batch of reads as one read-only transaction and
// gives each its own response, under the transaction's header.
func (b *batcher) commitReads(ctx context.Context, batch []*batchWrite) {
	var ops []clientv3.Op
	for _, w := range batch {
		ops = append(ops, w.thens...)
	}
	resp, err := b.kv.Txn(ctx).Then(ops...).Commit()
	if err == nil && len(resp.Responses) != len(ops) {
		err = fmt.Errorf("authority: a batch of %d reads answered %d", len(ops), len(resp.Responses))
	}
	i := 0
	for _, w := range batch {
		if err != nil {
			w.done <- batchResult{err: err}
			continue
		}
		own := &clientv3.TxnResponse{Header: resp.Header, Succeeded: true, Responses: append([]*pb.ResponseOp(nil), resp.Responses[i:i+len(w.thens)]...)}
		i += len(w.thens)
		w.done <- batchResult{resp: own}
	}
}
