package authority

import (
	"bytes"
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
)

// The one-write rule for bulk moves (docs/proposals/one-write-bulk-moves.md):
// a bulk's intents live in its own key, relocations/<bulk id>, written
// once by the source for the whole bulk, and each record is written once,
// by its commit or its preserve. These are its transactions.

// BulkIntent and BulkUnit are the bulk key's value (pkg/record).
type (
	BulkIntent = record.BulkIntent
	BulkUnit   = record.BulkUnit
)

// ErrInvalidBulkIntent: a bulk intent is malformed; nothing was written.
var ErrInvalidBulkIntent = record.ErrInvalidBulkIntent

// bulkFenceValue is a bulk fence's value (only its ModRevision matters).
const bulkFenceValue = `{"bulkFence":true}`

// bulkIntentFixedOps: the bulk intent's compares besides one per object
// (the key is new; the source is alive).
const bulkIntentFixedOps = 2

// BulkUnitsWithin is how many objects one bulk intent may carry within
// l: the write compares each record, the key and the source's owner key.
func BulkUnitsWithin(l Limits) int { return l.orDefault().MaxTxnOps - bulkIntentFixedOps }

// MaxBulkUnits is how many objects one bulk intent of this Store may carry.
func (s *Store) MaxBulkUnits() int { return BulkUnitsWithin(s.limits()) }

// limits are the cluster's bounds this Store writes within.
func (s *Store) limits() Limits {
	if s.batch != nil {
		return s.batch.limits
	}
	return DefaultLimits()
}

// BulkIntentResult is the outcome of WriteBulkIntent.
type BulkIntentResult struct {
	// Written: the key holds the intent; Revision is its ModRevision,
	// which every commit of the bulk compares.
	Written  bool
	Revision int64
	// Not written: the objects whose record is gone or no longer at the
	// unit's store version; the records as read (a missing one is absent);
	// whether the source is alive; whether the key was there already (a
	// bulk id is never reused).
	Stale      []string
	Current    map[string]Snapshot
	OwnerAlive bool
	Exists     bool
	// Resolved: decided by a read-back after an RPC error. A write that
	// read back as not written may still be applied late; it lets nothing
	// commit without a PREPARE, and the sweep removes it.
	Resolved bool
}

// WriteBulkIntent writes a bulk's intents, once, after its source sealed
// every object:
//
//	If CreateRevision(relocations/<id>)=0 ∧ ModRevision(auth_i)=unit_i.storeVersion ∀i
//	   ∧ CreateRevision(owners/source)=source.Generation
//	Then put relocations/<id> and relocations/<id>/fence (no lease)
//	Else get every record, the source's owner key and relocations/<id>
//
// The records are not written. A failed compare is not an error:
// Written=false says which objects went stale; the source leaves them out
// and writes the rest under a new id.
func (s *Store) WriteBulkIntent(ctx context.Context, id string, b BulkIntent) (BulkIntentResult, error) {
	b.Kind = record.BulkIntentKind
	if err := keyspace.ValidateOwnerID(id); err != nil {
		return BulkIntentResult{}, fmt.Errorf("%w: bulk id: %w", ErrInvalidRequest, err)
	}
	if err := b.Validate(s.MaxBulkUnits()); err != nil {
		return BulkIntentResult{}, err
	}
	val := b.Encode()
	if len(val) > record.MaxBulkIntentBytes {
		return BulkIntentResult{}, fmt.Errorf("%w: %d bytes", ErrInvalidBulkIntent, len(val))
	}
	key, ownerKey := s.keys.Relocation(id), s.keys.Owner(b.Source.ID)
	objs := make([]keyspace.Object, len(b.Units))
	cmps := make([]clientv3.Cmp, 0, len(b.Units)+bulkIntentFixedOps)
	gets := make([]clientv3.Op, 0, len(b.Units)+2)
	for i, u := range b.Units {
		objs[i], _ = keyspace.ParseObject(u.Object) // validated
		k := s.keys.Authority(objs[i])
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", u.StoreVersion))
		gets = append(gets, clientv3.OpGet(k))
	}
	cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(ownerKey), "=", b.Source.Generation))
	gets = append(gets, clientv3.OpGet(ownerKey), clientv3.OpGet(key, clientv3.WithKeysOnly()))
	// The fence shares the intent's ModRevision (one transaction): each
	// commit compares it, a few bytes, instead of the intent's many.
	puts := []clientv3.Op{clientv3.OpPut(key, string(val)), clientv3.OpPut(s.keys.BulkFence(id), bulkFenceValue)}
	resp, err := s.txn(ctx, "bulk intent").If(cmps...).Then(puts...).Else(gets...).Commit()
	if err != nil {
		got, rerr := s.c.Get(ctx, key)
		switch {
		case rerr != nil:
			return BulkIntentResult{}, fmt.Errorf("%w: bulk intent %s: %w (read-back: %w)", ErrUncertain, id, err, rerr)
		case len(got.Kvs) == 1 && bytes.Equal(got.Kvs[0].Value, val):
			return BulkIntentResult{Written: true, Revision: got.Kvs[0].ModRevision, OwnerAlive: true, Resolved: true}, nil
		case IsNoSpace(err):
			return BulkIntentResult{Resolved: true}, fmt.Errorf("%w: the bulk intent %s was not written", ErrNoSpace, id)
		}
		return BulkIntentResult{Resolved: true, Exists: len(got.Kvs) > 0}, nil
	}
	if resp.Succeeded {
		return BulkIntentResult{Written: true, Revision: resp.Header.Revision, OwnerAlive: true}, nil
	}
	v, err := s.view(resp, objs, []string{b.Source.ID}, 0)
	if err != nil {
		return BulkIntentResult{}, err
	}
	res := BulkIntentResult{Current: v.Objects, OwnerAlive: v.Alive(b.Source), Exists: len(resp.Responses[len(objs)+1].GetResponseRange().GetKvs()) > 0}
	for _, u := range b.Units {
		if cur, ok := v.Objects[u.Object]; !ok || cur.StoreVersion != u.StoreVersion {
			res.Stale = append(res.Stale, u.Object)
		}
	}
	return res, nil
}

// ReadBulkIntent reads relocations/<id> as the target checks its PREPAREs
// against it: the intent and its ModRevision, which each commit of the
// bulk compares. found is false when there is no bulk intent under id.
// The read is linearizable: the source wrote the key before any PREPARE
// left.
func (s *Store) ReadBulkIntent(ctx context.Context, id string) (b BulkIntent, revision int64, found bool, err error) {
	if err := keyspace.ValidateOwnerID(id); err != nil {
		return BulkIntent{}, 0, false, fmt.Errorf("%w: bulk id: %w", ErrInvalidRequest, err)
	}
	resp, err := s.c.Get(ctx, s.keys.Relocation(id))
	if err != nil {
		return BulkIntent{}, 0, false, fmt.Errorf("authority: read bulk intent %s: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return BulkIntent{}, 0, false, nil
	}
	b, found, err = record.DecodeBulkIntent(resp.Kvs[0].Value, s.MaxBulkUnits())
	if err != nil || !found {
		return BulkIntent{}, 0, false, err
	}
	return b, resp.Kvs[0].ModRevision, true, nil
}

// DeleteBulkIntent deletes relocations/<id> if it is still at revision
// and its source is alive:
//
//	If ModRevision(relocations/<id>)=revision ∧ CreateRevision(owners/source)=source.Generation
//	Then delete relocations/<id> and relocations/<id>/fence
//
// It is both the cleanup once every object of the bulk was committed or
// preserved, and the whole-bulk abort: from the delete on no commit of the
// bulk passes its compare of the key, and each record still at its unit's
// store version is the source's again. deleted is false when the key
// changed or is gone, or the source is not alive (the sweep then removes
// it after its deadline).
func (s *Store) DeleteBulkIntent(ctx context.Context, id string, revision int64, source OwnerRef) (deleted bool, err error) {
	if err := keyspace.ValidateOwnerID(id); err != nil || revision <= 0 || source.ID == "" {
		return false, fmt.Errorf("%w: delete of bulk intent %q at %d by %v", ErrInvalidRequest, id, revision, source)
	}
	key := s.keys.Relocation(id)
	resp, err := s.txn(ctx, "bulk delete").If(
		clientv3.Compare(clientv3.ModRevision(key), "=", revision),
		clientv3.Compare(clientv3.CreateRevision(s.keys.Owner(source.ID)), "=", source.Generation),
	).Then(clientv3.OpDelete(key), clientv3.OpDelete(s.keys.BulkFence(id))).Commit()
	if err != nil {
		got, rerr := s.c.Get(ctx, key, clientv3.WithKeysOnly())
		if rerr != nil {
			return false, fmt.Errorf("%w: delete of bulk intent %s: %w (read-back: %w)", ErrUncertain, id, err, rerr)
		}
		// Gone, or at another revision: either way no commit of the bulk
		// can pass its compare of the key any more.
		return len(got.Kvs) == 0 || got.Kvs[0].ModRevision != revision, nil
	}
	return resp.Succeeded, nil
}

// validateBulk checks a bulk unit's commit (CommitRequest.Bulk): one actor
// outside any group, whose record, as the source sealed it, is active,
// carries no intent and is not the target's already.
func (req CommitRequest) validateBulk() error {
	b := req.Bulk
	if keyspace.ValidateOwnerID(b.ID) != nil || b.Revision <= 0 {
		return fmt.Errorf("%w: bulk fence %q at %d", ErrInvalidRequest, b.ID, b.Revision)
	}
	if req.Join != nil || len(req.Participants) != 1 {
		return fmt.Errorf("%w: a bulk unit's commit carries exactly one actor and no join", ErrInvalidRequest)
	}
	p := req.Participants[0].Expected
	if p.Object.Validate() != nil || p.Object.Kind != keyspace.KindActor || p.StoreVersion <= 0 {
		return fmt.Errorf("%w: bulk unit %q at %d", ErrInvalidRequest, p.Object, p.StoreVersion)
	}
	r := p.Record
	if r.State != StateActive || r.Intent != nil || r.Owner == req.Target || r.Group != "" || len(r.Members) > 0 {
		return fmt.Errorf("%w: %s: a bulk unit's record is the source's, active, outside any group and without an intent", ErrNotIntended, p.Object)
	}
	return nil
}
