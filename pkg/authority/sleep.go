package authority

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/keyspace"
)

// Sleep and wake (docs/developing/lifecycle.md): an idle object leaves its owner's
// memory and its record names no owner; the next call wakes it on a node
// placement chooses. Each is one transaction guarded like an intent:
//
//	Sleep: If ModRevision(auth)=seen ∧ CreateRevision(owners/owner)=owner.Generation
//	       Then put the record with state sleeping, no owner, no node, ownerGeneration+1
//	Wake:  If ModRevision(auth)=seen ∧ CreateRevision(owners/new)=new.Generation
//	       Then put the record with state active, owned by new, ownerGeneration+1
//
// The object generation is kept: a sleep loses nothing (a durable object's
// state is in state/<object>, written before every reply). Both bump the
// authority generation, so a fence taken before a sleep is older than
// every fence after the wake, and every planned record is unique (an
// uncertain write is recognised by reading back exactly its bytes).

// SleepRequest puts the object of Seen, owned by Owner, to sleep.
type SleepRequest struct {
	Seen  Snapshot
	Owner OwnerRef
}

// Sleeping is the record an active record becomes when its object sleeps.
func Sleeping(r Record) Record {
	r.Members = nil
	r.AuthorityGeneration++
	r.Owner, r.Node = OwnerRef{}, NodeRef{}
	r.State, r.Intent, r.LastRelocation = StateSleeping, nil, ""
	return r
}

// Sleep writes the sleeping record (see above). Written=false: the record
// changed or the owner's key is gone; the object did not sleep.
func (s *Store) Sleep(ctx context.Context, req SleepRequest) (WriteResult, error) {
	rec := req.Seen.Record
	switch {
	case rec.Owner != req.Owner || rec.State != StateActive:
		return WriteResult{}, fmt.Errorf("%w: sleep by %v of a record owned by %v in state %s", ErrInvalidRequest, req.Owner, rec.Owner, rec.State)
	case req.Seen.Object.Kind != keyspace.KindActor || rec.Group != "":
		return WriteResult{}, fmt.Errorf("%w: %s cannot sleep: only an actor outside any group sleeps", ErrInvalidRequest, req.Seen.Object)
	}
	return s.writeOne(ctx, "sleep", req.Seen, req.Owner, Sleeping(rec), nil)
}

// WakeRequest wakes the sleeping object of Seen on Owner, reached at Node.
type WakeRequest struct {
	Seen  Snapshot
	Owner OwnerRef
	Node  NodeRef
	// ReadState: the wake reads the object's persisted state and replies
	// in its own transaction (WriteResult.State), so a durable object
	// kept in etcd wakes in one round trip instead of two.
	ReadState bool
}

// Woken is the record a sleeping record becomes when owner wakes it.
func Woken(r Record, owner OwnerRef, node NodeRef) Record {
	r.AuthorityGeneration++
	r.Owner, r.Node, r.State = owner, node, StateActive
	return r
}

// Wake writes the woken record (see above). Written=false: the record
// changed (another node woke it first: Snapshot says who) or Owner's key
// is gone.
func (s *Store) Wake(ctx context.Context, req WakeRequest) (WriteResult, error) {
	if !req.Seen.Record.Asleep() {
		return WriteResult{}, fmt.Errorf("%w: wake %s: its record is %s, not sleeping", ErrInvalidRequest, req.Seen.Object, req.Seen.Record.State)
	}
	if err := keyspace.ValidateOwnerID(req.Owner.ID); err != nil || req.Owner.Generation <= 0 {
		return WriteResult{}, fmt.Errorf("%w: owner %v", ErrInvalidRequest, req.Owner)
	}
	var extra []clientv3.Op
	if req.ReadState {
		extra = s.stateGets(req.Seen.Object)
	}
	w, err := s.writeOne(ctx, "wake", req.Seen, req.Owner, Woken(req.Seen.Record, req.Owner, req.Node), extra)
	if err == nil && req.ReadState && len(w.then) == 1+len(extra) {
		// A state that does not decode is left to the owner's own read,
		// which reports it.
		if rd, err := s.stateFrom(req.Seen.Object, w.then[1:], w.Snapshot.Revision); err == nil {
			w.State = &rd
		}
	}
	w.then = nil
	return w, err
}
