package authority

import (
	"bytes"
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/keyspace"
)

// Recovery: taking over an object whose owner is gone (txn.go holds the
// other writes; recover_many.go recovers many at once).

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

func (req RecoverRequest) validate() error {
	if err := req.Seen.Object.Validate(); err != nil || req.Seen.StoreVersion <= 0 {
		return fmt.Errorf("%w: snapshot of %q", ErrInvalidRequest, req.Seen.Object)
	}
	if req.Seen.Record.Asleep() {
		// Not an orphan: nobody owns it, and a call wakes it (Wake).
		return fmt.Errorf("%w: %s is asleep, not orphaned", ErrInvalidRequest, req.Seen.Object)
	}
	if err := keyspace.ValidateOwnerID(req.NewOwner.ID); err != nil || req.NewOwner.Generation <= 0 {
		return fmt.Errorf("%w: new owner %v", ErrInvalidRequest, req.NewOwner)
	}
	return nil
}

// grouped: a group, or a group's member, is recovered with its whole group.
func (req RecoverRequest) grouped() bool {
	return req.Seen.Object.Kind == keyspace.KindGroup || req.Seen.Record.Group != ""
}

// Recover re-activates an orphaned object on a live owner:
//
//	If ModRevision(auth)=seen ∧ CreateRevision(owners/old)≠old.Generation ∧
//	   CreateRevision(owners/new)=new.Generation ∧ catalog unchanged [∧ guard]
//	Then put the record with objectGeneration = max(catalog, seen)+1, ownerGeneration+1
//
// Written=false with OwnerAlive=true means the old owner is alive: not orphaned.
//
// A group, or a group's member, is recovered with its whole group: the group
// record and every member in one transaction (group.go), so a recovery
// never splits a group between owners; the result is Seen's object's.
func (s *Store) Recover(ctx context.Context, req RecoverRequest) (WriteResult, error) {
	if err := req.validate(); err != nil {
		return WriteResult{}, err
	}
	var p recoverPlan
	if req.grouped() {
		var err error
		if p, err = s.planGroupRecovery(ctx, req); err != nil || p.decided {
			return p.res, err
		}
	} else {
		cat, err := s.c.Get(ctx, s.keys.Catalog(req.Seen.Object))
		if err != nil {
			return WriteResult{}, fmt.Errorf("authority: recover %s: %w", req.Seen.Object, err)
		}
		var c catalogSeen
		if len(cat.Kvs) > 0 {
			c = catalogSeen{rev: cat.Kvs[0].ModRevision, last: decodeCatalog(cat.Kvs[0].Value).LastObjectGeneration}
		}
		p = s.planRecovery(req, c)
	}
	resp, err := s.c.Txn(ctx).If(p.txn.cmps...).Then(p.txn.thens...).Else(p.txn.elses...).Commit()
	return s.recovered(ctx, p, resp, err)
}

// catalogSeen is an object's catalog entry as read: its ModRevision (0:
// none) and the last object generation it holds.
type catalogSeen struct{ rev, last int64 }

// recoverPlan is one recovery's transaction, the records it writes, and how
// to read its outcome. decided: no transaction is needed, res is the
// answer (a group that changed since it was seen).
type recoverPlan struct {
	obj     keyspace.Object   // the requested object (req.Seen's)
	old     OwnerRef          // the owner gone (the group's, for a group)
	objs    []keyspace.Object // every record written, in planned's order
	planned []Record
	idx     int // obj's index in objs
	guard   *Guard
	txn     pendingTxn
	decided bool
	res     WriteResult
}

// planRecovery plans the recovery of one actor outside any group (see
// Recover) from its catalog entry as read.
func (s *Store) planRecovery(req RecoverRequest, cat catalogSeen) recoverPlan {
	obj := req.Seen.Object
	k, catKey := s.keys.Authority(obj), s.keys.Catalog(obj)
	old := req.Seen.Record.Owner
	oldKey, newKey := s.keys.Owner(old.ID), s.keys.Owner(req.NewOwner.ID)
	rec := req.Seen.Record
	rec.ObjectGeneration = max(cat.last, rec.ObjectGeneration) + 1
	rec.AuthorityGeneration++
	rec.Owner, rec.Node, rec.State, rec.Intent = req.NewOwner, req.Node, StateActive, nil
	catVal := catalogEntry{LastObjectGeneration: rec.ObjectGeneration, Deleted: rec.Deleted, DeletedAtMs: rec.DeletedAtMs}.encode()
	p := recoverPlan{obj: obj, old: old, objs: []keyspace.Object{obj}, planned: []Record{rec}, guard: req.Guard}
	p.txn.cmps = []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(k), "=", req.Seen.StoreVersion),
		clientv3.Compare(clientv3.CreateRevision(oldKey), "!=", old.Generation),
		clientv3.Compare(clientv3.CreateRevision(newKey), "=", req.NewOwner.Generation),
		clientv3.Compare(clientv3.ModRevision(catKey), "=", cat.rev),
	}
	p.txn.thens = []clientv3.Op{clientv3.OpPut(k, string(rec.Encode())), clientv3.OpPut(catKey, catVal)}
	p.txn.elses = []clientv3.Op{clientv3.OpGet(k), clientv3.OpGet(oldKey)}
	p.addGuard()
	return p
}

// addGuard adds the guard's compare, and its get to Else (third, after the
// record's and the old owner key's).
func (p *recoverPlan) addGuard() {
	if g := p.guard; g != nil {
		p.txn.cmps = append(p.txn.cmps, clientv3.Compare(clientv3.CreateRevision(g.Key), "=", g.CreateRevision))
		p.txn.elses = append(p.txn.elses, clientv3.OpGet(g.Key))
	}
}

// recovered reads a recovery's outcome from its transaction's response; an
// RPC error is resolved by reading back whether every planned record is in
// etcd.
func (s *Store) recovered(ctx context.Context, p recoverPlan, resp *clientv3.TxnResponse, err error) (WriteResult, error) {
	if err != nil {
		v, rerr := s.ReadMany(ctx, p.objs, []string{p.old.ID})
		if rerr != nil {
			return WriteResult{}, fmt.Errorf("%w: recover %s: %w (read-back: %w)", ErrUncertain, p.obj, err, rerr)
		}
		written := true
		for i, o := range p.objs {
			c, ok := v.Objects[o.String()]
			written = written && ok && bytes.Equal(c.Record.Encode(), p.planned[i].Encode())
		}
		cur, found := v.Objects[p.obj.String()]
		return WriteResult{Written: written, Snapshot: cur, Found: found, OwnerAlive: v.Alive(p.old), Resolved: true,
			NoSpace: !written && IsNoSpace(err)}, nil
	}
	if resp.Succeeded {
		rev := resp.Header.Revision
		return WriteResult{Written: true, Found: true, Snapshot: Snapshot{Object: p.obj, Record: p.planned[p.idx], StoreVersion: rev, Revision: rev}}, nil
	}
	v, err := s.view(resp, []keyspace.Object{p.obj}, []string{p.old.ID}, 0)
	if err != nil {
		return WriteResult{}, err
	}
	cur, found := v.Objects[p.obj.String()]
	res := WriteResult{Snapshot: cur, Found: found, OwnerAlive: v.Alive(p.old)}
	if g := p.guard; g != nil {
		kvs := resp.Responses[2].GetResponseRange().GetKvs()
		res.GuardLost = len(kvs) == 0 || kvs[0].CreateRevision != g.CreateRevision
	}
	return res, nil
}

// Orphaned reports whether a record's owner is gone in view v (the owner key
// is absent or has another CreateRevision).
func Orphaned(rec Record, v View) bool { return !v.Alive(rec.Owner) }
