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
// goes with its source).
func (s *Store) ListBulk(ctx context.Context, id string, l BulkListing, lease clientv3.LeaseID) error {
	if id == "" {
		return fmt.Errorf("%w: a bulk move's listing needs its id", ErrInvalidRequest)
	}
	l.Bulk = true
	val, _ := json.Marshal(l)
	_, err := s.txn(ctx, "list bulk").Then(clientv3.OpPut(s.keys.Relocation(id), string(val), clientv3.WithLease(lease))).Commit()
	return err
}

// UnlistBulk deletes relocations/<id>, once the bulk move ended.
func (s *Store) UnlistBulk(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("%w: a bulk move's listing needs its id", ErrInvalidRequest)
	}
	_, err := s.txn(ctx, "unlist bulk").Then(clientv3.OpDelete(s.keys.Relocation(id))).Commit()
	return err
}
