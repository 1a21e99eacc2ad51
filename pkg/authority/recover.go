package authority

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/keyspace"
)

// Recovery: taking over an object whose owner is gone (txn.go holds the
// other writes).

// RecoverRequest re-creates an object whose owner died with it.
type RecoverRequest struct {
	Seen     Snapshot
	NewOwner OwnerRef
	Node     NodeRef
	// Guard, when set, is one more compare of the transaction: its key must
	// exist with its CreateRevision (locationd's recovery controller passes
	// its election key, so a controller that lost its election writes
	// nothing). A failed guard gives Written=false, GuardLost=true.
	Guard *Guard
}

// Guard is a key that must exist with exactly this CreateRevision for a
// write to happen (concurrency.Election's Key and Rev).
type Guard struct {
	Key            string
	CreateRevision int64
}

// Recover re-activates an orphaned object on a live owner:
//
//	If ModRevision(auth)=seen ∧ CreateRevision(owners/old)≠old.Generation ∧
//	   CreateRevision(owners/new)=new.Generation ∧ catalog unchanged
//	Then put the record with objectGeneration = max(catalog, seen)+1, ownerGeneration+1
//
// Written=false with OwnerAlive=true means the old owner is alive: not orphaned.
//
// A group, or a group's member, is recovered with its whole group: the group
// record and every member in one transaction (group.go), so a recovery
// never splits a group between owners; the result is Seen's object's.
func (s *Store) Recover(ctx context.Context, req RecoverRequest) (WriteResult, error) {
	if err := req.Seen.Object.Validate(); err != nil || req.Seen.StoreVersion <= 0 {
		return WriteResult{}, fmt.Errorf("%w: snapshot of %q", ErrInvalidRequest, req.Seen.Object)
	}
	if err := keyspace.ValidateOwnerID(req.NewOwner.ID); err != nil || req.NewOwner.Generation <= 0 {
		return WriteResult{}, fmt.Errorf("%w: new owner %v", ErrInvalidRequest, req.NewOwner)
	}
	if req.Seen.Object.Kind == keyspace.KindGroup || req.Seen.Record.Group != "" {
		return s.recoverGroup(ctx, req) // the group and every member, in one transaction (group.go)
	}
	obj := req.Seen.Object
	k, catKey := s.keys.Authority(obj), s.keys.Catalog(obj)
	old := req.Seen.Record.Owner
	oldKey, newKey := s.keys.Owner(old.ID), s.keys.Owner(req.NewOwner.ID)
	cat, err := s.c.Get(ctx, catKey)
	if err != nil {
		return WriteResult{}, fmt.Errorf("authority: recover %s: %w", obj, err)
	}
	var catRev, last int64
	if len(cat.Kvs) > 0 {
		catRev, last = cat.Kvs[0].ModRevision, decodeCatalog(cat.Kvs[0].Value)
	}
	rec := req.Seen.Record
	rec.ObjectGeneration = max(last, rec.ObjectGeneration) + 1
	rec.OwnerGeneration++
	rec.Owner, rec.Node, rec.State, rec.Intent = req.NewOwner, req.Node, StateActive, nil
	planned := rec.Encode()
	catVal, _ := json.Marshal(catalogEntry{LastObjectGeneration: rec.ObjectGeneration})
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(k), "=", req.Seen.StoreVersion),
		clientv3.Compare(clientv3.CreateRevision(oldKey), "!=", old.Generation),
		clientv3.Compare(clientv3.CreateRevision(newKey), "=", req.NewOwner.Generation),
		clientv3.Compare(clientv3.ModRevision(catKey), "=", catRev),
	}
	elses := []clientv3.Op{clientv3.OpGet(k), clientv3.OpGet(oldKey)}
	if g := req.Guard; g != nil {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(g.Key), "=", g.CreateRevision))
		elses = append(elses, clientv3.OpGet(g.Key))
	}
	resp, err := s.c.Txn(ctx).If(cmps...).Then(
		clientv3.OpPut(k, string(planned)), clientv3.OpPut(catKey, string(catVal)),
	).Else(elses...).Commit()
	if err != nil {
		v, rerr := s.ReadMany(ctx, []keyspace.Object{obj}, []string{old.ID})
		if rerr != nil {
			return WriteResult{}, fmt.Errorf("%w: recover %s: %w (read-back: %w)", ErrUncertain, obj, err, rerr)
		}
		cur, found := v.Objects[obj.String()]
		written := found && bytes.Equal(cur.Record.Encode(), planned)
		return WriteResult{Written: written, Snapshot: cur, Found: found, OwnerAlive: v.Alive(old), Resolved: true}, nil
	}
	if resp.Succeeded {
		return WriteResult{Written: true, Found: true, Snapshot: Snapshot{
			Object: obj, Record: rec, StoreVersion: resp.Header.Revision, Revision: resp.Header.Revision,
		}}, nil
	}
	v, err := s.view(resp, []keyspace.Object{obj}, []string{old.ID}, 0)
	if err != nil {
		return WriteResult{}, err
	}
	cur, found := v.Objects[obj.String()]
	res := WriteResult{Snapshot: cur, Found: found, OwnerAlive: v.Alive(old)}
	if g := req.Guard; g != nil {
		kvs := resp.Responses[2].GetResponseRange().GetKvs()
		res.GuardLost = len(kvs) == 0 || kvs[0].CreateRevision != g.CreateRevision
	}
	return res, nil
}

// Orphaned reports whether a record's owner is gone in view v (the owner key
// is absent or has another CreateRevision).
func Orphaned(rec Record, v View) bool { return !v.Alive(rec.Owner) }
