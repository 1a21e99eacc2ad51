package locationd

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// history reads up to n earlier versions of obj's record, newest first,
// from etcd's history: each one a read of the key just before the
// revision the version after it was written at. It stops at the record's
// creation (nothing before) or at etcd's compaction (compacted true).
func (h *handlers) history(ctx context.Context, obj keyspace.Object, storeVersion int64, n int) ([]api.RecordVersion, bool, error) {
	key := h.s.keys.Authority(obj)
	out := []api.RecordVersion{}
	for rev := storeVersion; len(out) < n && rev > 1; {
		resp, err := h.cli.Get(ctx, key, clientv3.WithRev(rev-1))
		if errors.Is(err, rpctypes.ErrCompacted) {
			return out, true, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("%w: history of %s at revision %d: %w", errUnavailable, obj, rev-1, err)
		}
		if len(resp.Kvs) == 0 {
			break // created at rev (or deleted before it)
		}
		kv := resp.Kvs[0]
		rec, err := authority.DecodeRecord(kv.Value)
		if err != nil {
			return nil, false, fmt.Errorf("%w: %s at store version %d: %w", authority.ErrInvalidRecord, obj, kv.ModRevision, err)
		}
		out = append(out, api.RecordVersion{Record: rec, StoreVersion: kv.ModRevision})
		rev = kv.ModRevision
	}
	return out, false, nil
}
