package authority

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/record"
)

// sweepPage is how many keys of relocations/ one read of the sweep takes.
const sweepPage = 512

// SweepBulkIntents deletes every bulk intent whose deadline plus grace is
// before nowMs, whoever wrote it: a bulk intent is bound to no lease, so
// one whose source died, or whose write was applied after its source gave
// up on it, is removed here (the recovery controller's sweep). By then no
// commit of it can happen: its target gave up at the deadline, and grace
// covers the clocks' skew. Each delete compares the key's ModRevision with
// the one read. A value under relocations/ that does not decode is left
// alone and counted in bad.
func (s *Store) SweepBulkIntents(ctx context.Context, nowMs, graceMs int64) (swept, bad int, err error) {
	prefix := s.keys.RelocationsPrefix()
	from, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	for {
		resp, err := s.c.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(sweepPage))
		if err != nil {
			return swept, bad, fmt.Errorf("authority: sweep bulk intents: %w", err)
		}
		for _, kv := range resp.Kvs {
			b, found, derr := record.DecodeBulkIntent(kv.Value, MaxBulkUnits(s.limits()))
			switch {
			case derr != nil:
				bad++
				continue
			case !found || b.DeadlineMs+graceMs >= nowMs:
				continue
			}
			del, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
				Then(clientv3.OpDelete(string(kv.Key))).Commit()
			if err != nil {
				return swept, bad, fmt.Errorf("authority: sweep bulk intent %s: %w", kv.Key, err)
			}
			if del.Succeeded {
				swept++
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return swept, bad, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
