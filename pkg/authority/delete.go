package authority

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Delete (docs/developing/lifecycle.md) ends an object: one transaction
// removes its record, its persisted state and replies, and marks the
// deletion in its catalog entry:
//
//	If ModRevision(auth)=seen [∧ CreateRevision(owners/by)=by.Generation]
//	Then delete auth, state/<obj>, state/<obj>/replies/*;
//	     put catalog {last: objectGeneration, deleted: objectGeneration, deletedAt: now}
//	Else get auth
//
// The owner compare is there when the owner ends its own object
// (actor.Context.Delete); an operator's delete is fenced by the record's
// store version alone, and the owner, if any, notices its record gone and
// drops the instance (docs/design.md §9.1). A durable owner's next write
// compares the record and fails, so nothing is acknowledged after the
// delete that the delete did not remove.
//
// The catalog is written without being read: every write that sets an
// object generation (Activate, Recover, a join) writes the catalog in the
// same transaction, so while the record exists the catalog's last
// generation is the record's. The next Activate of the name takes
// generation last+1 and copies the deleted mark into its record
// (Record.Deleted): a caller that knew the deleted generation is told so.

// ErrNotDeletable: the object cannot be deleted now or at all; nothing
// changed. A relocating object can be deleted once its relocation settled.
var ErrNotDeletable = wire.Sentinel(pb.Code_CODE_CONFLICT, "authority: object cannot be deleted")

// DeleteRequest deletes the object of Seen.
type DeleteRequest struct {
	Seen Snapshot
	// By is the owner ending its own object: its key must still have its
	// generation and it must be the record's owner. Zero: an operator.
	By OwnerRef
	// At is when the delete is made, by the deleter's clock (zero: now):
	// operations made before it are refused by the name's next objects
	// (Record.DeletedAtMs).
	At time.Time
}

// DeleteResult is the outcome of Delete.
type DeleteResult struct {
	// Deleted: the record, state and replies are gone (by this request, or
	// by a concurrent delete of the same generation).
	Deleted bool
	// Revision of the delete (Deleted, not Resolved).
	Revision int64
	// Snapshot is the record now when not Deleted (Found=false: none).
	Snapshot Snapshot
	Found    bool
	// Resolved: decided by a read-back after an RPC error.
	Resolved bool
}

// Deletable is the one rule of which records may be deleted: an actor
// outside any group, not in a relocation. A group's members are deleted
// one by one after leaving it, and a group once empty (docs).
func Deletable(obj keyspace.Object, r Record) error {
	switch {
	case obj.Kind != keyspace.KindActor:
		return fmt.Errorf("%w: %s is a group: delete its members after they leave it", ErrNotDeletable, obj)
	case r.Group != "":
		return fmt.Errorf("%w: %s is a member of %s: it must leave the group first", ErrNotDeletable, obj, r.Group)
	case r.State == StateRelocating || r.Intent != nil:
		return fmt.Errorf("%w: %s is relocating: delete it once the relocation settled", ErrNotDeletable, obj)
	}
	return nil
}

// Delete deletes the object of req.Seen (see above).
func (s *Store) Delete(ctx context.Context, req DeleteRequest) (DeleteResult, error) {
	obj, rec := req.Seen.Object, req.Seen.Record
	if err := obj.Validate(); err != nil || req.Seen.StoreVersion <= 0 {
		return DeleteResult{}, fmt.Errorf("%w: snapshot of %q", ErrInvalidRequest, obj)
	}
	if err := Deletable(obj, rec); err != nil {
		return DeleteResult{}, err
	}
	k := s.keys.Authority(obj)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k), "=", req.Seen.StoreVersion)}
	if !req.By.IsZero() {
		if rec.Owner != req.By {
			return DeleteResult{}, fmt.Errorf("%w: delete by %v of a record owned by %v", ErrInvalidRequest, req.By, rec.Owner)
		}
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.keys.Owner(req.By.ID)), "=", req.By.Generation))
	}
	gen, at := rec.ObjectGeneration, req.At
	if at.IsZero() {
		at = time.Now()
	}
	resp, err := s.txn(ctx, "delete").If(cmps...).Then(
		clientv3.OpDelete(k),
		clientv3.OpDelete(s.keys.State(obj)),
		clientv3.OpDelete(s.keys.StateReplies(obj), clientv3.WithPrefix()),
		clientv3.OpPut(s.keys.Catalog(obj), catalogEntry{LastObjectGeneration: gen, Deleted: gen, DeletedAtMs: max(at.UnixMilli(), 1)}.encode()),
	).Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return s.resolveDelete(ctx, obj, gen, err)
	}
	if resp.Succeeded {
		return DeleteResult{Deleted: true, Revision: resp.Header.Revision}, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return s.resolveDelete(ctx, obj, gen, nil)
	}
	snap, err := s.snapshot(kvs[0], resp.Header.Revision)
	if err != nil {
		return DeleteResult{}, err
	}
	return DeleteResult{Snapshot: snap, Found: true}, nil
}

// resolveDelete decides a delete whose reply was lost (cause) or whose
// record was found gone: deleted iff the record is absent and the catalog
// marks generation gen, or a later one, deleted.
func (s *Store) resolveDelete(ctx context.Context, obj keyspace.Object, gen int64, cause error) (DeleteResult, error) {
	resp, err := s.c.Txn(ctx).Then(clientv3.OpGet(s.keys.Authority(obj)), clientv3.OpGet(s.keys.Catalog(obj))).Commit()
	if err != nil {
		return DeleteResult{}, fmt.Errorf("%w: delete %s: %v (read-back: %w)", ErrUncertain, obj, cause, err)
	}
	resolved := cause != nil
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		snap, err := s.snapshot(kvs[0], resp.Header.Revision)
		if err != nil {
			return DeleteResult{}, err
		}
		return DeleteResult{Snapshot: snap, Found: true, Resolved: resolved}, nil
	}
	var cat catalogEntry
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		cat = decodeCatalog(kvs[0].Value)
	}
	if cat.Deleted >= gen {
		return DeleteResult{Deleted: true, Resolved: resolved}, nil
	}
	return DeleteResult{Resolved: resolved}, nil
}

// deleteAttempts bounds the deletes of one DeleteObject that find the
// record changed since it was read (a move, a sleep, a wake in between).
const deleteAttempts = 5

// DeleteObject is an operator's delete of obj (DELETE /v1/objects,
// meshctl delete), fenced by the record's store version alone. The first
// read is local (ReadLocal: it may be stale, which only fails the delete's
// compare, whose Else gives the current record for the next attempt); a
// record not found locally is confirmed by a quorum read. It returns the
// record deleted; ErrNotFound, ErrNotDeletable (also when the record kept
// changing), or the store's error otherwise, with nothing deleted.
func (s *Store) DeleteObject(ctx context.Context, obj keyspace.Object) (Snapshot, DeleteResult, error) {
	snap, err := s.ReadLocal(ctx, obj)
	if errors.Is(err, ErrNotFound) {
		snap, err = s.Read(ctx, obj)
	}
	if err != nil {
		return Snapshot{}, DeleteResult{}, err
	}
	for range deleteAttempts {
		res, err := s.Delete(ctx, DeleteRequest{Seen: snap})
		switch {
		case err != nil:
			return snap, res, err
		case res.Deleted:
			return snap, res, nil
		case !res.Found:
			return snap, res, fmt.Errorf("%w: %s", ErrNotFound, obj)
		}
		snap = res.Snapshot
	}
	return snap, DeleteResult{}, fmt.Errorf("%w: %s kept changing while it was deleted: try again", ErrNotDeletable, obj)
}
