package authority

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// BulkListing is the value of relocations/<bulk id> while a bulk move
// runs: what an operator sees of it with etcdctl. Its units write no
// relocations/<id> of their own (IntentRequest.Unlisted); each record
// being moved carries its own intent, naming its target. Nothing of
// meshloc reads it back.
type BulkListing struct {
	Bulk          bool     `json:"bulk"`
	Source        OwnerRef `json:"source"`
	Target        OwnerRef `json:"target"`
	Objects       int      `json:"objects"`
	StartedUnixMs int64    `json:"startedUnixMs"`
}

// ListBulk puts relocations/<id> bound to lease (the source's: the key
// goes with its source), if l.Source is alive: like every write of
// relocations/, it is fenced by its writer's owner key. A source that is
// no longer alive gets ErrOwnerNotAlive and writes nothing.
func (s *Store) ListBulk(ctx context.Context, id string, l BulkListing, lease clientv3.LeaseID) error {
	if id == "" || l.Source.ID == "" {
		return fmt.Errorf("%w: a bulk move's listing needs its id and its source", ErrInvalidRequest)
	}
	l.Bulk = true
	val, _ := json.Marshal(l)
	return s.fenced(ctx, "list bulk", l.Source, clientv3.OpPut(s.keys.Relocation(id), string(val), clientv3.WithLease(lease)))
}

// UnlistBulk deletes relocations/<id> once the bulk move ended, if its
// source is alive (a source that is not has lost the key with its lease).
func (s *Store) UnlistBulk(ctx context.Context, id string, source OwnerRef) error {
	if id == "" || source.ID == "" {
		return fmt.Errorf("%w: a bulk move's listing needs its id and its source", ErrInvalidRequest)
	}
	return s.fenced(ctx, "unlist bulk", source, clientv3.OpDelete(s.keys.Relocation(id)))
}

// fenced runs op if owner is alive (its key's CreateRevision is its
// generation).
func (s *Store) fenced(ctx context.Context, what string, owner OwnerRef, op clientv3.Op) error {
	resp, err := s.txn(ctx, what).If(clientv3.Compare(clientv3.CreateRevision(s.keys.Owner(owner.ID)), "=", owner.Generation)).
		Then(op).Commit()
	switch {
	case err != nil:
		return err
	case !resp.Succeeded:
		return fmt.Errorf("%w: %s by %v", ErrOwnerNotAlive, what, owner)
	}
	return nil
}
