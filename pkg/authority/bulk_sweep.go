package authority

import (
	"context"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/record"
)

// sweepPage is how many keys of relocations/ one read takes.
const sweepPage = 512

// StoredBulkIntent is a bulk intent as etcd holds it: its id and the
// ModRevision of its key.
type StoredBulkIntent struct {
	ID       string
	Revision int64
	Intent   BulkIntent
}

// ListBulkIntents reads every bulk intent under relocations/ (paged, each
// page at its own revision). A value there that is not a bulk intent is
// skipped; one that claims to be and does not decode is counted in bad.
func (s *Store) ListBulkIntents(ctx context.Context) (out []StoredBulkIntent, bad int, err error) {
	err = s.eachRelocation(ctx, func(kv *mvccpb.KeyValue) error {
		b, found, derr := record.DecodeBulkIntent(kv.Value, s.MaxBulkUnits())
		switch {
		case derr != nil:
			bad++
		case found:
			out = append(out, StoredBulkIntent{ID: strings.TrimPrefix(string(kv.Key), s.keys.RelocationsPrefix()), Revision: kv.ModRevision, Intent: b})
		}
		return nil
	})
	return out, bad, err
}

// SweepBulkIntents deletes every bulk intent whose deadline plus grace is
// before nowMs, whoever wrote it: a bulk intent is bound to no lease, so
// one whose source died, or whose write was applied after its source gave
// up on it, is removed here (the recovery controller's sweep). By then no
// commit of it can happen: its target gave up at the deadline, and grace
// covers the clocks' skew. Each delete compares the key's ModRevision with
// the one read, and takes the key's fence with it. A value under
// relocations/ that does not decode is left alone and counted in bad.
func (s *Store) SweepBulkIntents(ctx context.Context, nowMs, graceMs int64) (swept, bad int, err error) {
	all, bad, err := s.ListBulkIntents(ctx)
	if err != nil {
		return 0, bad, err
	}
	for _, b := range all {
		if b.Intent.DeadlineMs+graceMs >= nowMs {
			continue
		}
		key := s.keys.Relocation(b.ID)
		del, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", b.Revision)).
			Then(clientv3.OpDelete(key), clientv3.OpDelete(s.keys.BulkFence(b.ID))).Commit()
		if err != nil {
			return swept, bad, fmt.Errorf("authority: sweep bulk intent %s: %w", b.ID, err)
		}
		if del.Succeeded {
			swept++
		}
	}
	return swept, bad, nil
}

// eachRelocation calls f for every key under relocations/, in pages.
func (s *Store) eachRelocation(ctx context.Context, f func(kv *mvccpb.KeyValue) error) error {
	prefix := s.keys.RelocationsPrefix()
	from, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	for {
		resp, err := s.c.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(sweepPage))
		if err != nil {
			return fmt.Errorf("authority: list relocations: %w", err)
		}
		for _, kv := range resp.Kvs {
			if err := f(kv); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
