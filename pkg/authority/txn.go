package authority

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/keyspace"
)

// ---------------------------------------------------------------- activate

// ActivateRequest places an object that has no record on a live owner.
type ActivateRequest struct {
	Object keyspace.Object
	Owner  OwnerRef
	Node   NodeRef
	// Group, for an actor created as a member of a group.
	Group  string
	Pinned bool
	// ReadState: the activation reads the version of the object's state
	// key (a durable object's predecessor may have left one) in its own
	// transaction (ActivateResult.State).
	ReadState bool
}

// ActivateResult says who owns the object after Activate.
type ActivateResult struct {
	// Won is true when this call created the record.
	Won bool
	// Snapshot is the record now in etcd: ours when Won, the winner's otherwise.
	Snapshot Snapshot
	// State holds the state key's version at the activation (its value is
	// not read: a fresh object restores nothing), when asked and Won by
	// the transaction itself (not by a read-back).
	State *StateRead
}

// catalogEntry is the value of catalog/<object>: the last object
// generation the name had, and the last one deleted (Record.Deleted), both
// kept after the record is deleted so that the next object of the name has
// a larger generation and its callers learn of the deletion.
type catalogEntry struct {
	LastObjectGeneration int64 `json:"lastObjectGeneration"`
	Deleted              int64 `json:"deletedObjectGeneration,omitempty"`
	DeletedAtMs          int64 `json:"deletedAtUnixMs,omitempty"`
}

func decodeCatalog(b []byte) catalogEntry {
	var c catalogEntry
	if len(b) == 0 || json.Unmarshal(b, &c) != nil {
		return catalogEntry{}
	}
	return c
}

func (c catalogEntry) encode() string {
	b, _ := json.Marshal(c)
	return string(b)
}

func (r ActivateRequest) validate() error {
	if err := r.Object.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	if err := keyspace.ValidateOwnerID(r.Owner.ID); err != nil || r.Owner.Generation <= 0 {
		return fmt.Errorf("%w: owner %v", ErrInvalidRequest, r.Owner)
	}
	return nil
}

// maxTxnRetries bounds the retries of a transaction whose compare failed only
// because an unrelated key (the catalog) moved.
const maxTxnRetries = 16

// Activate creates the object's record owned by req.Owner:
//
//	If CreateRevision(auth)=0 ∧ CreateRevision(owners/owner)=owner.Generation ∧ catalog unchanged
//	Then put the record (objectGeneration = catalog+1, ownerGeneration 1), bump the catalog
//	Else get auth, owner, catalog
//
// A lost race returns the winner's record (Won=false). An owner that is not
// alive gets ErrOwnerNotAlive. An RPC error is resolved by reading back.
// On a batched Store the first calls of many objects share etcd round
// trips (each its own nested transaction).
func (s *Store) Activate(ctx context.Context, req ActivateRequest) (ActivateResult, error) {
	if err := req.validate(); err != nil {
		return ActivateResult{}, err
	}
	authKey := s.keys.Authority(req.Object)
	ownerKey := s.keys.Owner(req.Owner.ID)
	catKey := s.keys.Catalog(req.Object)
	var catRev int64
	var last catalogEntry
	var stateVersion []clientv3.Op
	if req.ReadState {
		stateVersion = []clientv3.Op{clientv3.OpGet(s.keys.State(req.Object), clientv3.WithKeysOnly())}
	}
	for range maxTxnRetries {
		rec := Record{
			Kind: req.Object.Kind, Type: req.Object.Type,
			ObjectGeneration: last.LastObjectGeneration + 1, AuthorityGeneration: 1,
			Owner: req.Owner, Node: req.Node, State: StateActive,
			Group: req.Group, Pinned: req.Pinned, Deleted: last.Deleted, DeletedAtMs: last.DeletedAtMs,
		}
		planned := rec.Encode()
		cat := catalogEntry{LastObjectGeneration: rec.ObjectGeneration, Deleted: last.Deleted, DeletedAtMs: last.DeletedAtMs}.encode()
		resp, err := s.txn(ctx, "activate").If(
			clientv3.Compare(clientv3.CreateRevision(authKey), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(ownerKey), "=", req.Owner.Generation),
			clientv3.Compare(clientv3.ModRevision(catKey), "=", catRev),
		).Then(append([]clientv3.Op{
			clientv3.OpPut(authKey, string(planned)),
			clientv3.OpPut(catKey, cat),
		}, stateVersion...)...).Else(
			clientv3.OpGet(authKey),
			clientv3.OpGet(ownerKey),
			clientv3.OpGet(catKey),
		).Commit()
		if err != nil {
			// Uncertain: read back. Ours iff the record is exactly the planned bytes.
			snap, rerr := s.Read(ctx, req.Object)
			switch {
			case rerr == nil && bytes.Equal(snap.Record.Encode(), planned):
				return ActivateResult{Won: true, Snapshot: snap}, nil
			case rerr == nil:
				return ActivateResult{Won: false, Snapshot: snap}, nil
			case errors.Is(rerr, ErrNotFound) && IsNoSpace(err):
				// Not written, and no write will be until the alarm is
				// disarmed: say so at once.
				return ActivateResult{}, fmt.Errorf("%w: activate %s: %w", ErrNoSpace, req.Object, err)
			case errors.Is(rerr, ErrNotFound):
				continue // not written: try again
			default:
				return ActivateResult{}, fmt.Errorf("%w: activate %s: %w (read-back: %v)", ErrUncertain, req.Object, err, rerr)
			}
		}
		if resp.Succeeded {
			res := ActivateResult{Won: true, Snapshot: Snapshot{
				Object: req.Object, Record: rec, StoreVersion: resp.Header.Revision, Revision: resp.Header.Revision,
			}}
			if req.ReadState && len(resp.Responses) == 3 {
				res.State = &StateRead{Revision: resp.Header.Revision}
				if kvs := resp.Responses[2].GetResponseRange().GetKvs(); len(kvs) > 0 {
					res.State.StateVersion = kvs[0].ModRevision
				}
			}
			return res, nil
		}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			snap, err := s.snapshot(kvs[0], resp.Header.Revision)
			if err != nil {
				return ActivateResult{}, err
			}
			return ActivateResult{Won: false, Snapshot: snap}, nil
		}
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].CreateRevision != req.Owner.Generation {
			return ActivateResult{}, fmt.Errorf("%w: %v activating %s", ErrOwnerNotAlive, req.Owner, req.Object)
		}
		catRev, last = 0, catalogEntry{}
		if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 {
			catRev, last = kvs[0].ModRevision, decodeCatalog(kvs[0].Value)
		}
	}
	return ActivateResult{}, fmt.Errorf("authority: activate %s: catalog kept moving", req.Object)
}

// ---------------------------------------------------------------- commit

// Participant is one object of a commit: the snapshot the source captured.
type Participant struct {
	Expected Snapshot
}

// CommitRequest moves every participant to Target in one transaction.
type CommitRequest struct {
	RelocationID string
	Participants []Participant
	Target       OwnerRef
	TargetNode   NodeRef
	// Join, for an Actor Join: the group (owned by the target) that the one
	// actor participant joins; the same transaction writes the membership
	// (group.go).
	Join *JoinCommit
	// Bulk, for an object of a bulk move under the one-write rule
	// (bulk_intent.go): its bulk intent's key and the ModRevision the
	// target read it at. The one participant's expected record then
	// carries no intent (the key does) and is compared by its bytes and
	// its store version, the key by its ModRevision; relocations/<id> is
	// not deleted.
	Bulk *BulkFence
}

// BulkFence is what a bulk unit's commit compares besides its record:
// relocations/<ID> is still at Revision, the one its target read.
type BulkFence struct {
	ID       string
	Revision int64
}

// CommitResult is the outcome of Commit.
type CommitResult struct {
	// Committed is true when every participant is now owned by the target.
	Committed bool
	// Revision of the commit, or of the read that decided it failed.
	Revision int64
	// Records after the commit (Committed), or the current ones (not
	// Committed; a missing participant is absent from the map).
	Records map[string]Snapshot
	// TargetAlive reports whether the target's owner key had its generation.
	TargetAlive bool
	// Resolved is true when the outcome was decided by a read-back after an
	// RPC error (the reply was lost).
	Resolved bool
}

// Planned returns the record a participant gets when committed to target.
func Planned(p Participant, target OwnerRef, node NodeRef, relocationID string) Record {
	r := p.Expected.Record
	r.Members = append([]string(nil), r.Members...)
	r.AuthorityGeneration++
	r.Owner = target
	r.Node = node
	r.State = StateActive
	r.Intent = nil
	r.LastRelocation = relocationID
	return r
}

func (req CommitRequest) validate() error {
	if len(req.Participants) == 0 {
		return fmt.Errorf("%w: commit without participants", ErrInvalidRequest)
	}
	if req.RelocationID == "" {
		return fmt.Errorf("%w: commit without relocation id", ErrInvalidRequest)
	}
	if err := keyspace.ValidateOwnerID(req.Target.ID); err != nil || req.Target.Generation <= 0 {
		return fmt.Errorf("%w: target %v", ErrInvalidRequest, req.Target)
	}
	if err := req.validateJoin(); err != nil {
		return err
	}
	if req.Bulk != nil {
		return req.validateBulk()
	}
	seen := map[string]bool{}
	for _, p := range req.Participants {
		name := p.Expected.Object.String()
		if err := p.Expected.Object.Validate(); err != nil || p.Expected.StoreVersion <= 0 {
			return fmt.Errorf("%w: participant %q", ErrInvalidRequest, name)
		}
		if seen[name] {
			return fmt.Errorf("%w: participant %q twice", ErrInvalidRequest, name)
		}
		seen[name] = true
		if err := p.Expected.Record.IntendedFor(req.RelocationID, req.Target); err != nil {
			return fmt.Errorf("%w: participant %q: %w", ErrInvalidRequest, name, err)
		}
	}
	return nil
}

// Commit is the target's cutover transaction (docs/design.md §3):
//
//	If Value(auth_i)=expected record_i ∀i ∧ CreateRevision(owners/target)=target.Generation
//	Then put every participant owned by the target, ownerGeneration+1, intent cleared
//	Else get every participant and the target's owner key
//
// Every expected record must carry this relocation's intent naming the
// target (Record.IntendedFor; otherwise ErrInvalidRequest and nothing is
// sent), and the transaction compares each record's exact bytes: a commit
// is valid only for its own intent, as etcd holds it. Those bytes exist from
// the intent's write until the record's next write (a preserve, another
// commit), and no write recreates them (they name this relocation), so the
// compare also does what a compare of the store version would: exactly one
// of Commit and Preserve wins. A store version alone is public, so a commit
// that compared only it would let anyone who reaches a node have it commit
// a relocation nobody started.
//
// A failed compare is not an error: Committed=false with the current records.
// An RPC error is resolved by reading back exactly the planned records; if that
// read fails too, the error wraps ErrUncertain and the caller must resolve
// again (ResolveCommit).
func (s *Store) Commit(ctx context.Context, req CommitRequest) (CommitResult, error) {
	return s.commit(ctx, req, true)
}

// commit is Commit; compareRecords false drops the record compares, and a
// bulk unit's compare of its bulk's fence (only the planted bugs
// commit-without-compare and bulk-commit-ignores-compare of test builds
// ask for that: txn_failpoints.go).
func (s *Store) commit(ctx context.Context, req CommitRequest, compareRecords bool) (CommitResult, error) {
	if err := req.validate(); err != nil {
		return CommitResult{}, err
	}
	n := len(req.Participants)
	cmps := make([]clientv3.Cmp, 0, n+1)
	puts := make([]clientv3.Op, 0, n)
	// A bulk's commits fill most of a drain's etcd requests, and their
	// compares almost never fail: reading the records on failure in every
	// one of them (raft entry, WAL, apply) costs more than one read after
	// the rare one that failed.
	var gets []clientv3.Op
	get := func(key string) {
		if req.Bulk == nil {
			gets = append(gets, clientv3.OpGet(key))
		}
	}
	planned := make([]Record, n)
	for i, p := range req.Participants {
		k := s.keys.Authority(p.Expected.Object)
		rec := req.planned(p)
		planned[i] = rec
		if compareRecords {
			// The record's exact bytes carry this relocation's intent, which
			// exists only from its Intend to the next write of the record:
			// no later write recreates them, so this compare also pins the
			// store version (one compare per participant keeps a group's
			// commit within --max-txn-ops).
			cmps = append(cmps, clientv3.Compare(clientv3.Value(k), "=", string(p.Expected.Record.Encode())))
			if req.Bulk != nil {
				// A bulk unit's record carries no intent (the bulk's key
				// does), so its bytes pin what the target checked and
				// will write, and its store version, the one the key
				// names, decides between this commit and a preserve.
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", p.Expected.StoreVersion))
			}
		}
		puts = append(puts, clientv3.OpPut(k, string(rec.Encode())))
		get(k)
	}
	if j := req.Join; j != nil {
		gk := s.keys.Authority(j.Group.Object)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(gk), "=", j.Group.StoreVersion))
		puts = append(puts, clientv3.OpPut(gk, string(req.plannedGroupBytes())))
		get(gk)
	}
	ownerKey := s.keys.Owner(req.Target.ID)
	cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(ownerKey), "=", req.Target.Generation))
	get(ownerKey)
	switch b := req.Bulk; {
	case b != nil && compareRecords:
		// The bulk's key stays until every object of the bulk ended; its
		// fence, written with it, has its ModRevision.
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.keys.BulkFence(b.ID)), "=", b.Revision))
	case b != nil:
	default:
		// The relocation is over once committed: its intent key goes with it.
		puts = append(puts, clientv3.OpDelete(s.keys.Relocation(req.RelocationID)))
	}
	resp, err := s.txn(ctx, "commit").If(cmps...).Then(puts...).Else(gets...).Commit()
	if err != nil {
		res, rerr := s.ResolveCommit(ctx, req)
		if rerr != nil {
			return CommitResult{}, fmt.Errorf("%w: commit %s: %w (read-back: %w)", ErrUncertain, req.RelocationID, err, rerr)
		}
		return res, nil
	}
	objs := req.objects()
	if resp.Succeeded {
		res := CommitResult{Committed: true, Revision: resp.Header.Revision, Records: map[string]Snapshot{}, TargetAlive: true}
		for i, p := range req.Participants {
			res.Records[p.Expected.Object.String()] = Snapshot{
				Object: p.Expected.Object, Record: planned[i],
				StoreVersion: resp.Header.Revision, Revision: resp.Header.Revision,
			}
		}
		if j := req.Join; j != nil {
			res.Records[j.Group.Object.String()] = Snapshot{Object: j.Group.Object, Record: req.plannedGroup(),
				StoreVersion: resp.Header.Revision, Revision: resp.Header.Revision}
		}
		return res, nil
	}
	var v View
	if req.Bulk != nil {
		// A later read than the failed compare's: as if the commit had
		// waited longer for its batch, which decides nothing differently.
		v, err = s.ReadMany(ctx, objs, []string{req.Target.ID})
	} else {
		v, err = s.view(resp, objs, []string{req.Target.ID}, 0)
	}
	if err != nil {
		return CommitResult{}, err
	}
	return CommitResult{Revision: v.Revision, Records: v.Objects, TargetAlive: v.Alive(req.Target)}, nil
}

func participantObjects(ps []Participant) []keyspace.Object {
	out := make([]keyspace.Object, len(ps))
	for i, p := range ps {
		out[i] = p.Expected.Object
	}
	return out
}

// ResolveCommit decides an uncertain commit by one read at one revision: it
// committed iff every participant holds exactly its planned bytes at a store
// version newer than expected. Anything else means it did not commit (the
// compare of a later commit cannot match the planned bytes, because each
// planned record names its relocation).
func (s *Store) ResolveCommit(ctx context.Context, req CommitRequest) (CommitResult, error) {
	if err := req.validate(); err != nil {
		return CommitResult{}, err
	}
	v, err := s.ReadMany(ctx, req.objects(), []string{req.Target.ID})
	if err != nil {
		return CommitResult{}, err
	}
	res := CommitResult{Revision: v.Revision, Records: v.Objects, TargetAlive: v.Alive(req.Target), Resolved: true}
	for _, p := range req.Participants {
		cur, ok := v.Objects[p.Expected.Object.String()]
		planned := req.planned(p)
		if !ok || cur.StoreVersion <= p.Expected.StoreVersion || !bytes.Equal(cur.Record.Encode(), planned.Encode()) {
			return res, nil
		}
	}
	if j := req.Join; j != nil {
		cur, ok := v.Objects[j.Group.Object.String()]
		if !ok || cur.StoreVersion <= j.Group.StoreVersion || !bytes.Equal(cur.Record.Encode(), req.plannedGroupBytes()) {
			return res, nil
		}
	}
	res.Committed = true
	return res, nil
}

// ---------------------------------------------------------------- intent / preserve

// IntentRequest marks an object as relocating (the source, at plan time).
type IntentRequest struct {
	Seen   Snapshot // the source's current record; it must own it
	Source OwnerRef
	Intent Intent
	// LeaseID binds relocations/<id> to the source's lease.
	LeaseID clientv3.LeaseID
	// Unlisted: no relocations/<id> key. A bulk move's units are listed
	// once, under the bulk's own key (ListBulk), not one key per object:
	// those keys were an eighth of a drain's CPU.
	Unlisted bool
	// Members are the other participants (a group's members, owned by the
	// source too): written relocating with the same intent in the same
	// transaction, each compared at its store version (group.go).
	Members []Snapshot
}

// WriteResult is the outcome of a single-record write (Intend, Preserve).
type WriteResult struct {
	// Written is true when the record now holds the planned value.
	Written bool
	// Snapshot is the record after the write (Written) or the current one
	// (absent: Found=false).
	Snapshot Snapshot
	Found    bool
	// OwnerAlive reports whether the writer's owner key had its generation.
	OwnerAlive bool
	// Resolved is true when decided by a read-back after an RPC error.
	Resolved bool
	// GuardLost: the request's Guard key was gone or re-created (Recover).
	GuardLost bool
	// NoSpace: etcd refused the write for want of space (its NOSPACE
	// alarm) and the read-back found it not written (nospace.go).
	NoSpace bool
	// Members: for a group's intent or preserve, the other participants'
	// records after the write (Written), or the current ones found.
	Members map[string]Snapshot
	// State is the object's persisted state and replies, read in the
	// write's own transaction (a wake's, WakeRequest.ReadState); nil when
	// not asked, not written, or decided by a read-back.
	State *StateRead

	then []*etcdserverpb.ResponseOp // the answers of the write's Then (writeOne)
}

// relocationIntent is the value of relocations/<id>, for operators
// (nothing of meshloc reads it back; the key lives with the source's lease).
type relocationIntent struct {
	Object string   `json:"object"`
	Source OwnerRef `json:"source"`
	Intent
	Phase string `json:"phase"`
}

// Intend writes the relocation intent:
//
//	If ModRevision(auth)=seen ∧ CreateRevision(owners/source)=source.Generation
//	Then put the record with state relocating and the intent; put relocations/<id> bound to the source's lease
func (s *Store) Intend(ctx context.Context, req IntentRequest) (WriteResult, error) {
	if req.Intent.RelocationID == "" || req.Seen.Record.Owner != req.Source {
		return WriteResult{}, fmt.Errorf("%w: intent by %v on a record owned by %v", ErrInvalidRequest, req.Source, req.Seen.Record.Owner)
	}
	rec := req.Seen.Record
	in := req.Intent
	rec.State, rec.Intent = StateRelocating, &in
	var extra []clientv3.Op
	if !req.Unlisted {
		val, _ := json.Marshal(relocationIntent{Object: req.Seen.Object.String(), Source: req.Source, Intent: in, Phase: "prepared"})
		extra = append(extra, clientv3.OpPut(s.keys.Relocation(in.RelocationID), string(val), clientv3.WithLease(req.LeaseID)))
	}
	var res WriteResult
	var err error
	if len(req.Members) > 0 {
		res, err = s.writeGroup(ctx, req.Seen, req.Members, req.Source, func(r Record) Record {
			r.State, r.Intent = StateRelocating, &in
			return r
		}, extra)
	} else {
		res, err = s.writeOne(ctx, "intent", req.Seen, req.Source, rec, extra)
	}
	if err == nil && res.NoSpace {
		// Not "the record changed": the relocation cannot start while etcd
		// refuses writes.
		return res, fmt.Errorf("%w: the intent on %s was not written", ErrNoSpace, req.Seen.Object)
	}
	return res, err
}

// PreserveRequest: the source, still the owner after the deadline, keeps the
// object and cancels the relocation.
type PreserveRequest struct {
	Seen         Snapshot
	Source       OwnerRef
	RelocationID string
	// Members: the other participants, preserved in the same transaction.
	Members []Snapshot
}

// Preserve rewrites the record without the intent:
//
//	If ModRevision(auth)=seen ∧ CreateRevision(owners/source)=source.Generation
//	Then put the record (same generations, state active, no intent)
//
// It bumps the store version, so a late Commit from the same expected version
// fails: exactly one of Commit and Preserve wins.
func (s *Store) Preserve(ctx context.Context, req PreserveRequest) (WriteResult, error) {
	if req.RelocationID == "" || req.Seen.Record.Owner != req.Source {
		return WriteResult{}, fmt.Errorf("%w: preserve by %v on a record owned by %v", ErrInvalidRequest, req.Source, req.Seen.Record.Owner)
	}
	rec := req.Seen.Record
	rec.State, rec.Intent, rec.LastRelocation = StateActive, nil, req.RelocationID
	extra := []clientv3.Op{clientv3.OpDelete(s.keys.Relocation(req.RelocationID))}
	if len(req.Members) > 0 {
		return s.writeGroup(ctx, req.Seen, req.Members, req.Source, func(r Record) Record {
			r.State, r.Intent, r.LastRelocation = StateActive, nil, req.RelocationID
			return r
		}, extra)
	}
	return s.writeOne(ctx, "preserve", req.Seen, req.Source, rec, extra)
}

// writeOne is the guarded single-record write shared by Intend and Preserve.
func (s *Store) writeOne(ctx context.Context, what string, seen Snapshot, owner OwnerRef, rec Record, extra []clientv3.Op) (WriteResult, error) {
	if err := seen.Object.Validate(); err != nil || seen.StoreVersion <= 0 {
		return WriteResult{}, fmt.Errorf("%w: snapshot of %q", ErrInvalidRequest, seen.Object)
	}
	if err := rec.Validate(); err != nil {
		return WriteResult{}, err
	}
	k := s.keys.Authority(seen.Object)
	ok := s.keys.Owner(owner.ID)
	planned := rec.Encode()
	resp, err := s.txn(ctx, what).If(
		clientv3.Compare(clientv3.ModRevision(k), "=", seen.StoreVersion),
		clientv3.Compare(clientv3.CreateRevision(ok), "=", owner.Generation),
	).Then(append([]clientv3.Op{clientv3.OpPut(k, string(planned))}, extra...)...).Else(
		clientv3.OpGet(k), clientv3.OpGet(ok),
	).Commit()
	if err != nil {
		v, rerr := s.ReadMany(ctx, []keyspace.Object{seen.Object}, []string{owner.ID})
		if rerr != nil {
			return WriteResult{}, fmt.Errorf("%w: write %s: %w (read-back: %w)", ErrUncertain, seen.Object, err, rerr)
		}
		cur, found := v.Objects[seen.Object.String()]
		written := found && cur.StoreVersion > seen.StoreVersion && bytes.Equal(cur.Record.Encode(), planned)
		return WriteResult{Written: written, Snapshot: cur, Found: found, OwnerAlive: v.Alive(owner), Resolved: true,
			NoSpace: !written && IsNoSpace(err)}, nil
	}
	if resp.Succeeded {
		return WriteResult{Written: true, Found: true, OwnerAlive: true, Snapshot: Snapshot{
			Object: seen.Object, Record: rec, StoreVersion: resp.Header.Revision, Revision: resp.Header.Revision,
		}, then: resp.Responses}, nil
	}
	v, err := s.view(resp, []keyspace.Object{seen.Object}, []string{owner.ID}, 0)
	if err != nil {
		return WriteResult{}, err
	}
	cur, found := v.Objects[seen.Object.String()]
	return WriteResult{Snapshot: cur, Found: found, OwnerAlive: v.Alive(owner)}, nil
}
