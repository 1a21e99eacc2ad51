package authority

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/keyspace"
)

// Store reads and writes authority records. Every write is one etcd Txn guarded
// by a ModRevision compare and an owner key's CreateRevision (design.md §3).
type Store struct {
	c     *clientv3.Client
	keys  keyspace.Keys
	batch *batcher // relocation writes batched (nil: each alone): batch.go
	reads *batcher // local reads batched (nil: each alone): batch_reads.go
}

// New returns a Store over an etcd client.
func New(c *clientv3.Client, keys keyspace.Keys) *Store { return &Store{c: c, keys: keys} }

// Keys is the key codec of the store.
func (s *Store) Keys() keyspace.Keys { return s.keys }

// Client is the etcd client of the store.
func (s *Store) Client() *clientv3.Client { return s.c }

func (s *Store) snapshot(kv *mvccpb.KeyValue, rev int64) (Snapshot, error) {
	obj, err := s.keys.ParseAuthority(string(kv.Key))
	if err != nil {
		return Snapshot{}, err
	}
	r, err := DecodeRecord(kv.Value)
	if err != nil {
		return Snapshot{}, fmt.Errorf("%w: %s: %w", ErrCorruptRecord, kv.Key, err)
	}
	return Snapshot{Object: obj, Record: r, StoreVersion: kv.ModRevision, Revision: rev}, nil
}

// Read returns the object's record, or ErrNotFound.
func (s *Store) Read(ctx context.Context, obj keyspace.Object) (Snapshot, error) {
	return s.read(ctx, obj)
}

// ReadLocal is Read from the etcd member the client talks to, without a
// quorum round (serializable): it may be stale, so it serves only a write
// that compares the store version it read and learns the current record
// when that fails (Delete does).
func (s *Store) ReadLocal(ctx context.Context, obj keyspace.Object) (Snapshot, error) {
	if err := obj.Validate(); err != nil {
		return Snapshot{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	resp, err := s.readLocal(ctx, s.keys.Authority(obj))
	return s.readAnswer(obj, resp, err)
}

// ReadLocalReplied is ReadLocal of obj, and whether obj's persisted reply
// table holds replyID (state/<object>/replies/<id>), read in the same
// serializable transaction. A reply is persisted only with the change of
// the request it answers, so one found says that request ran and that
// change is persisted.
func (s *Store) ReadLocalReplied(ctx context.Context, obj keyspace.Object, replyID string) (snap Snapshot, replied bool, err error) {
	if err := obj.Validate(); err != nil {
		return Snapshot{}, false, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	if !validReplyID(replyID) {
		return Snapshot{}, false, fmt.Errorf("%w: reply id %q (want 32 lowercase hex digits)", ErrInvalidRequest, replyID)
	}
	resp, err := s.c.Txn(ctx).Then(
		clientv3.OpGet(s.keys.Authority(obj), clientv3.WithSerializable()),
		clientv3.OpGet(s.keys.StateReplies(obj)+replyID, clientv3.WithSerializable(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return Snapshot{}, false, fmt.Errorf("authority: read %s: %w", obj, err)
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return Snapshot{}, false, fmt.Errorf("%w: %s", ErrNotFound, obj)
	}
	snap, err = s.snapshot(kvs[0], resp.Header.Revision)
	return snap, err == nil && len(resp.Responses[1].GetResponseRange().GetKvs()) > 0, err
}

func (s *Store) read(ctx context.Context, obj keyspace.Object, opts ...clientv3.OpOption) (Snapshot, error) {
	if err := obj.Validate(); err != nil {
		return Snapshot{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	resp, err := s.c.Get(ctx, s.keys.Authority(obj), opts...)
	return s.readAnswer(obj, resp, err)
}

// readAnswer is the snapshot a read of obj's record answered.
func (s *Store) readAnswer(obj keyspace.Object, resp *clientv3.GetResponse, err error) (Snapshot, error) {
	if err != nil {
		return Snapshot{}, fmt.Errorf("authority: read %s: %w", obj, err)
	}
	if len(resp.Kvs) == 0 {
		return Snapshot{}, fmt.Errorf("%w: %s", ErrNotFound, obj)
	}
	return s.snapshot(resp.Kvs[0], resp.Header.Revision)
}

// ReadMany reads the objects and owner keys in one transaction, so at one
// revision (the settle read of docs/design.md §3).
func (s *Store) ReadMany(ctx context.Context, objs []keyspace.Object, owners []string) (View, error) {
	ops := make([]clientv3.Op, 0, len(objs)+len(owners))
	for _, o := range objs {
		if err := o.Validate(); err != nil {
			return View{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
		ops = append(ops, clientv3.OpGet(s.keys.Authority(o)))
	}
	for _, id := range owners {
		if err := keyspace.ValidateOwnerID(id); err != nil {
			return View{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
		ops = append(ops, clientv3.OpGet(s.keys.Owner(id)))
	}
	resp, err := s.c.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return View{}, fmt.Errorf("authority: read many: %w", err)
	}
	return s.view(resp, objs, owners, 0)
}

// view decodes a Txn response whose ops from index start are gets of objs
// then of owners.
func (s *Store) view(resp *clientv3.TxnResponse, objs []keyspace.Object, owners []string, start int) (View, error) {
	v := View{Revision: resp.Header.Revision, Objects: map[string]Snapshot{}, Owners: map[string]OwnerKey{}}
	i := start
	for range objs {
		r := resp.Responses[i].GetResponseRange()
		i++
		if r == nil || len(r.Kvs) == 0 {
			continue
		}
		snap, err := s.snapshot(r.Kvs[0], v.Revision)
		if err != nil {
			return View{}, err
		}
		v.Objects[snap.Object.String()] = snap
	}
	for _, id := range owners {
		r := resp.Responses[i].GetResponseRange()
		i++
		k := OwnerKey{}
		if r != nil && len(r.Kvs) > 0 {
			k = OwnerKey{Generation: r.Kvs[0].CreateRevision, Value: r.Kvs[0].Value}
		}
		v.Owners[id] = k
	}
	return v, nil
}
