package authority

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Groups (docs/design.md §2, §6). A group record (group/<id>) lists its member
// actors in Members; each member's record names the group in Group. Both
// sides are always written together, in one transaction, by the group's
// owner, which also owns every member: at no revision does a member name a
// group that does not list it, nor a group list an actor that does not name
// it, nor a member have another owner than its group.
//
//	create  Activate of the group record (no members)
//	Join    If ModRevision(G)=g ∧ ModRevision(A)=a ∧ owner alive            Then G.Members += A, A.Group = G
//	Join    If ModRevision(G)=g ∧ CreateRevision(A)=0 ∧ catalog(A) unchanged ∧ owner alive
//	                                                                          Then G.Members += A, create A (Group = G), bump catalog(A)
//	Leave   If ModRevision(G)=g ∧ ModRevision(A)=a ∧ owner alive            Then G.Members −= A, A.Group = ""
//	Commit with Join (Actor Join, the target): the actor moves to the group's
//	        owner and the same commit transaction writes both sides.
//
// A group moves as one relocation whose intent, commit and preserve
// transactions carry the group and every member (IntentRequest.Members,
// PreserveRequest.Members, CommitRequest.Participants); Limits bounds the
// size of a group so that they fit.

// Errors of group operations; nothing was written.
var (
	// ErrAlreadyMember: the actor is a member of a group already (this one or
	// another): it must leave first.
	ErrAlreadyMember = wire.Sentinel(pb.Code_CODE_CONFLICT, "authority: actor is already a group member")
	// ErrNotMember: the actor is not a member of the group.
	ErrNotMember = wire.Sentinel(pb.Code_CODE_CONFLICT, "authority: actor is not a member of the group")
	// ErrNotGroupOwner: the group or the actor is not owned by the writer, or
	// is relocating: the membership cannot change here now.
	ErrNotGroupOwner = wire.Sentinel(pb.Code_CODE_CONFLICT, "authority: group or actor not owned here")
)

// ---------------------------------------------------------------- multi-record intent and preserve

// writeGroup is the guarded write of several records (a group's intent or
// preserve): every record compared at its store version, the writer's owner
// key compared, every record rewritten by plan.
func (s *Store) writeGroup(ctx context.Context, primary Snapshot, members []Snapshot, owner OwnerRef, plan func(Record) Record, extra []clientv3.Op) (WriteResult, error) {
	all := append([]Snapshot{primary}, members...)
	seen := map[string]bool{}
	planned := make([]Record, len(all))
	objs := make([]keyspace.Object, len(all))
	var cmps []clientv3.Cmp
	var puts, gets []clientv3.Op
	for i, sn := range all {
		if err := sn.Object.Validate(); err != nil || sn.StoreVersion <= 0 || seen[sn.Object.String()] {
			return WriteResult{}, fmt.Errorf("%w: snapshot of %q", ErrInvalidRequest, sn.Object)
		}
		if sn.Record.Owner != owner {
			return WriteResult{}, fmt.Errorf("%w: %s is owned by %v, not %v", ErrInvalidRequest, sn.Object, sn.Record.Owner, owner)
		}
		seen[sn.Object.String()] = true
		planned[i] = plan(sn.Record)
		if err := planned[i].Validate(); err != nil {
			return WriteResult{}, err
		}
		objs[i] = sn.Object
		k := s.keys.Authority(sn.Object)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", sn.StoreVersion))
		puts = append(puts, clientv3.OpPut(k, string(planned[i].Encode())))
		gets = append(gets, clientv3.OpGet(k))
	}
	ok := s.keys.Owner(owner.ID)
	cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(ok), "=", owner.Generation))
	gets = append(gets, clientv3.OpGet(ok))
	resp, err := s.txn(ctx).If(cmps...).Then(append(puts, extra...)...).Else(gets...).Commit()
	result := func(v View, written bool) WriteResult {
		cur, found := v.Objects[primary.Object.String()]
		w := WriteResult{Written: written, Snapshot: cur, Found: found, OwnerAlive: v.Alive(owner), Members: map[string]Snapshot{}}
		for _, m := range members {
			if c, ok := v.Objects[m.Object.String()]; ok {
				w.Members[m.Object.String()] = c
			}
		}
		return w
	}
	if err != nil {
		v, rerr := s.ReadMany(ctx, objs, []string{owner.ID})
		if rerr != nil {
			return WriteResult{}, fmt.Errorf("%w: write %s: %w (read-back: %w)", ErrUncertain, primary.Object, err, rerr)
		}
		written := true
		for i, sn := range all {
			cur, found := v.Objects[sn.Object.String()]
			written = written && found && cur.StoreVersion > sn.StoreVersion && bytes.Equal(cur.Record.Encode(), planned[i].Encode())
		}
		w := result(v, written)
		w.Resolved = true
		return w, nil
	}
	if resp.Succeeded {
		v := View{Revision: resp.Header.Revision, Objects: map[string]Snapshot{}, Owners: map[string]OwnerKey{owner.ID: {Generation: owner.Generation}}}
		for i, sn := range all {
			v.Objects[sn.Object.String()] = Snapshot{Object: sn.Object, Record: planned[i], StoreVersion: resp.Header.Revision, Revision: resp.Header.Revision}
		}
		return result(v, true), nil
	}
	v, err := s.view(resp, objs, []string{owner.ID}, 0)
	if err != nil {
		return WriteResult{}, err
	}
	return result(v, false), nil
}

// ---------------------------------------------------------------- commit with join

// JoinCommit is the membership an Actor Join's commit writes.
type JoinCommit struct {
	// Group is the group's record as the target read it just before the
	// commit; the target owns it. The commit compares its store version.
	Group Snapshot
}

func (req CommitRequest) validateJoin() error {
	j := req.Join
	if j == nil {
		return nil
	}
	if len(req.Participants) != 1 || req.Participants[0].Expected.Object.Kind != keyspace.KindActor {
		return fmt.Errorf("%w: an Actor Join commits exactly one actor", ErrInvalidRequest)
	}
	if j.Group.Object.Kind != keyspace.KindGroup || j.Group.Object.Validate() != nil || j.Group.StoreVersion <= 0 {
		return fmt.Errorf("%w: join group %q", ErrInvalidRequest, j.Group.Object)
	}
	if j.Group.Record.Owner != req.Target || j.Group.Record.State != StateActive {
		return fmt.Errorf("%w: %s is owned by %v (%s), not by the target %v", ErrNotGroupOwner, j.Group.Object, j.Group.Record.Owner, j.Group.Record.State, req.Target)
	}
	a := req.Participants[0].Expected
	if a.Record.Group != "" || slices.Contains(j.Group.Record.Members, a.Object.String()) {
		return fmt.Errorf("%w: %s (of %q)", ErrAlreadyMember, a.Object, a.Record.Group)
	}
	return nil
}

// planned is the record participant p gets from this commit.
func (req CommitRequest) planned(p Participant) Record {
	r := Planned(p, req.Target, req.TargetNode, req.RelocationID)
	if req.Join != nil {
		r.Group = req.Join.Group.Object.String()
	}
	return r
}

// plannedGroup is the group record an Actor Join's commit writes.
func (req CommitRequest) plannedGroup() Record {
	g := req.Join.Group.Record
	g.Members = withMember(g.Members, req.Participants[0].Expected.Object.String())
	g.LastRelocation = req.RelocationID
	return g
}

// objects of the commit: the participants, then the join group.
func (req CommitRequest) objects() []keyspace.Object {
	objs := participantObjects(req.Participants)
	if req.Join != nil {
		objs = append(objs, req.Join.Group.Object)
	}
	return objs
}

// withMember returns members with m added, sorted (a copy).
func withMember(members []string, m string) []string {
	out := append([]string(nil), members...)
	if !slices.Contains(out, m) {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// withoutMember returns members without m (a copy).
func withoutMember(members []string, m string) []string {
	out := make([]string, 0, len(members))
	for _, x := range members {
		if x != m {
			out = append(out, x)
		}
	}
	return out
}

// ---------------------------------------------------------------- membership

// MembershipRequest joins or leaves: the group's owner changes the
// membership of one actor that it owns (or, for Join, that has no record).
type MembershipRequest struct {
	// Group is the group's record as read; it must be owned by Owner and active.
	Group Snapshot
	// Actor to join or leave.
	Actor keyspace.Object
	// ActorSeen is the actor's record as read; nil when it has none (Join
	// then creates it, owned by Owner).
	ActorSeen *Snapshot
	Owner     OwnerRef
	Node      NodeRef
	// Limits bound the group's size (Join); zero: etcd's defaults.
	Limits Limits
}

// MembershipResult is the outcome of Join or Leave.
type MembershipResult struct {
	// Written is true when both records now hold the planned values.
	Written bool
	// Group and Actor after the write, or as found now (Found false: absent).
	Group, Actor           Snapshot
	GroupFound, ActorFound bool
	// OwnerAlive: the owner key had the owner's generation.
	OwnerAlive bool
	// Resolved: decided by a read-back after an RPC error.
	Resolved bool
}

func (req MembershipRequest) validate(keys keyspace.Keys, join bool) error {
	g, a := req.Group, req.Actor
	if g.Object.Kind != keyspace.KindGroup || g.Object.Validate() != nil || g.StoreVersion <= 0 {
		return fmt.Errorf("%w: group %q", ErrInvalidRequest, g.Object)
	}
	if a.Kind != keyspace.KindActor || a.Validate() != nil {
		return fmt.Errorf("%w: %q is not an actor (want actor/<type>/<id>)", ErrInvalidRequest, a)
	}
	if err := keyspace.ValidateOwnerID(req.Owner.ID); err != nil || req.Owner.Generation <= 0 {
		return fmt.Errorf("%w: owner %v", ErrInvalidRequest, req.Owner)
	}
	if g.Record.Owner != req.Owner || g.Record.State != StateActive {
		return fmt.Errorf("%w: %s is owned by %v (%s), not by %v", ErrNotGroupOwner, g.Object, g.Record.Owner, g.Record.State, req.Owner)
	}
	if s := req.ActorSeen; s != nil {
		if s.Object != a || s.StoreVersion <= 0 {
			return fmt.Errorf("%w: actor snapshot of %q for %s", ErrInvalidRequest, s.Object, a)
		}
		if s.Record.Owner != req.Owner || s.Record.State != StateActive {
			return fmt.Errorf("%w: %s is owned by %v (%s), not by %v", ErrNotGroupOwner, a, s.Record.Owner, s.Record.State, req.Owner)
		}
	} else if !join {
		return fmt.Errorf("%w: %s has no record", ErrNotMember, a)
	}
	name := a.String()
	listed := slices.Contains(g.Record.Members, name)
	named := req.ActorSeen != nil && req.ActorSeen.Record.Group != ""
	if join {
		if listed || named {
			of := g.Object.String()
			if named {
				of = req.ActorSeen.Record.Group
			}
			return fmt.Errorf("%w: %s is a member of %s", ErrAlreadyMember, a, of)
		}
		recs := []Snapshot{g}
		if req.ActorSeen != nil {
			recs = append(recs, *req.ActorSeen)
		}
		for _, m := range g.Record.Members {
			if o, err := keyspace.ParseObject(m); err == nil {
				recs = append(recs, Snapshot{Object: o, Record: Record{Kind: o.Kind, Type: o.Type, Group: g.Object.String()}})
			}
		}
		return req.Limits.CheckGroup(keys, g.Object.String(), len(g.Record.Members)+1, recs)
	}
	if !listed || req.ActorSeen.Record.Group != g.Object.String() {
		return fmt.Errorf("%w: %s is not a member of %s", ErrNotMember, a, g.Object)
	}
	return nil
}

// Join makes req.Actor a member of req.Group (see the package comment of
// this file for the transaction). A failed compare is not an error: Written
// is false with the current records. Bad input, an actor already in a group
// or a group at its size limit get a typed error and change nothing.
func (s *Store) Join(ctx context.Context, req MembershipRequest) (MembershipResult, error) {
	if err := req.validate(s.keys, true); err != nil {
		return MembershipResult{}, err
	}
	g := req.Group.Record
	g.Members = withMember(g.Members, req.Actor.String())
	if req.ActorSeen != nil {
		a := req.ActorSeen.Record
		a.Group = req.Group.Object.String()
		return s.writeMembership(ctx, req, g, a)
	}
	catKey := s.keys.Catalog(req.Actor)
	var catRev, last int64
	for range maxTxnRetries {
		a := Record{
			Kind: req.Actor.Kind, Type: req.Actor.Type, ObjectGeneration: last + 1, OwnerGeneration: 1,
			Owner: req.Owner, Node: req.Node, State: StateActive, Group: req.Group.Object.String(),
		}
		cat, _ := json.Marshal(catalogEntry{LastObjectGeneration: a.ObjectGeneration})
		res, catResp, err := s.writeMembershipNew(ctx, req, g, a, catKey, catRev, string(cat))
		if err != nil || res.Written || res.Resolved || catResp == nil {
			return res, err
		}
		// Only the catalog moved (the actor is still absent): plan from it.
		catRev, last = catResp.ModRevision, decodeCatalog(catResp.Value)
	}
	return MembershipResult{}, fmt.Errorf("authority: join %s: catalog kept moving", req.Actor)
}

// Leave removes req.Actor from req.Group; req.ActorSeen is required.
func (s *Store) Leave(ctx context.Context, req MembershipRequest) (MembershipResult, error) {
	if err := req.validate(s.keys, false); err != nil {
		return MembershipResult{}, err
	}
	g := req.Group.Record
	g.Members = withoutMember(g.Members, req.Actor.String())
	a := req.ActorSeen.Record
	a.Group = ""
	return s.writeMembership(ctx, req, g, a)
}

// writeMembership writes both records of an existing actor.
func (s *Store) writeMembership(ctx context.Context, req MembershipRequest, g, a Record) (MembershipResult, error) {
	gk, ak, ok := s.keys.Authority(req.Group.Object), s.keys.Authority(req.Actor), s.keys.Owner(req.Owner.ID)
	gv, av := g.Encode(), a.Encode()
	resp, err := s.c.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(gk), "=", req.Group.StoreVersion),
		clientv3.Compare(clientv3.ModRevision(ak), "=", req.ActorSeen.StoreVersion),
		clientv3.Compare(clientv3.CreateRevision(ok), "=", req.Owner.Generation),
	).Then(
		clientv3.OpPut(gk, string(gv)), clientv3.OpPut(ak, string(av)),
	).Else(
		clientv3.OpGet(gk), clientv3.OpGet(ak), clientv3.OpGet(ok),
	).Commit()
	return s.membershipResult(ctx, req, resp, err, gv, av)
}

// writeMembershipNew writes the group and creates the actor; catResp is the
// catalog entry when only the catalog compare can have failed (retry).
func (s *Store) writeMembershipNew(ctx context.Context, req MembershipRequest, g, a Record, catKey string, catRev int64, cat string) (MembershipResult, *catalogKV, error) {
	gk, ak, ok := s.keys.Authority(req.Group.Object), s.keys.Authority(req.Actor), s.keys.Owner(req.Owner.ID)
	gv, av := g.Encode(), a.Encode()
	resp, err := s.c.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(gk), "=", req.Group.StoreVersion),
		clientv3.Compare(clientv3.CreateRevision(ak), "=", 0),
		clientv3.Compare(clientv3.ModRevision(catKey), "=", catRev),
		clientv3.Compare(clientv3.CreateRevision(ok), "=", req.Owner.Generation),
	).Then(
		clientv3.OpPut(gk, string(gv)), clientv3.OpPut(ak, string(av)), clientv3.OpPut(catKey, cat),
	).Else(
		clientv3.OpGet(gk), clientv3.OpGet(ak), clientv3.OpGet(ok), clientv3.OpGet(catKey),
	).Commit()
	res, rerr := s.membershipResult(ctx, req, resp, err, gv, av)
	if rerr != nil || err != nil || resp.Succeeded {
		return res, nil, rerr
	}
	if res.GroupFound && res.Group.StoreVersion == req.Group.StoreVersion && !res.ActorFound && res.OwnerAlive {
		c := &catalogKV{}
		if kvs := resp.Responses[3].GetResponseRange().GetKvs(); len(kvs) > 0 {
			c.ModRevision, c.Value = kvs[0].ModRevision, kvs[0].Value
		}
		return res, c, nil
	}
	return res, nil, nil
}

type catalogKV struct {
	ModRevision int64
	Value       []byte
}

// membershipResult decodes a membership transaction (or resolves its RPC
// error by reading back exactly the planned bytes).
func (s *Store) membershipResult(ctx context.Context, req MembershipRequest, resp *clientv3.TxnResponse, err error, gv, av []byte) (MembershipResult, error) {
	objs := []keyspace.Object{req.Group.Object, req.Actor}
	fill := func(v View) MembershipResult {
		r := MembershipResult{OwnerAlive: v.Alive(req.Owner)}
		r.Group, r.GroupFound = v.Objects[req.Group.Object.String()]
		r.Actor, r.ActorFound = v.Objects[req.Actor.String()]
		return r
	}
	if err != nil {
		v, rerr := s.ReadMany(ctx, objs, []string{req.Owner.ID})
		if rerr != nil {
			return MembershipResult{}, fmt.Errorf("%w: membership of %s in %s: %w (read-back: %w)", ErrUncertain, req.Actor, req.Group.Object, err, rerr)
		}
		r := fill(v)
		r.Resolved = true
		r.Written = r.GroupFound && r.ActorFound && r.Group.StoreVersion > req.Group.StoreVersion &&
			bytes.Equal(r.Group.Record.Encode(), gv) && bytes.Equal(r.Actor.Record.Encode(), av)
		return r, nil
	}
	if resp.Succeeded {
		g, _ := DecodeRecord(gv)
		a, _ := DecodeRecord(av)
		rev := resp.Header.Revision
		return MembershipResult{Written: true, OwnerAlive: true, GroupFound: true, ActorFound: true,
			Group: Snapshot{Object: req.Group.Object, Record: g, StoreVersion: rev, Revision: rev},
			Actor: Snapshot{Object: req.Actor, Record: a, StoreVersion: rev, Revision: rev}}, nil
	}
	v, err := s.view(resp, objs, []string{req.Owner.ID}, 0)
	if err != nil {
		return MembershipResult{}, err
	}
	return fill(v), nil
}

func (req CommitRequest) plannedGroupBytes() []byte {
	g := req.plannedGroup()
	return g.Encode()
}

// WithMember returns members with m added, sorted (a copy): a group's
// Members after m joins.
func WithMember(members []string, m string) []string { return withMember(members, m) }

// ---------------------------------------------------------------- recover

// recoverGroup is Recover of a group record or of one of its members: the
// group and every member are re-created on the new owner in one
// transaction, so a recovery never splits a group between owners.
//
//	If ModRevision(auth_i)=seen_i ∀ participants ∧ CreateRevision(owners/old)≠old.Generation ∧
//	   CreateRevision(owners/new)=new.Generation [∧ guard]
//	Then put every participant with objectGeneration+1, ownerGeneration+1, owned by new
//
// The catalog is not bumped: records are never deleted, so a record's own
// object generation is what a later recovery or activation starts from.
// The result is the requested object's (req.Seen's).
func (s *Store) recoverGroup(ctx context.Context, req RecoverRequest) (WriteResult, error) {
	obj := req.Seen.Object
	g := obj
	if obj.Kind != keyspace.KindGroup {
		var err error
		if g, err = keyspace.ParseObject(req.Seen.Record.Group); err != nil || g.Kind != keyspace.KindGroup {
			return WriteResult{}, fmt.Errorf("%w: %s names group %q", ErrInvalidRecord, obj, req.Seen.Record.Group)
		}
	}
	gs, err := s.Read(ctx, g)
	if err != nil {
		return WriteResult{}, fmt.Errorf("authority: recover %s: its group: %w", obj, err)
	}
	objs := []keyspace.Object{g}
	for _, m := range gs.Record.Members {
		o, err := keyspace.ParseObject(m)
		if err != nil {
			return WriteResult{}, fmt.Errorf("%w: %s lists %q", ErrInvalidRecord, g, m)
		}
		objs = append(objs, o)
	}
	old := gs.Record.Owner
	v, err := s.ReadMany(ctx, objs, []string{old.ID})
	if err != nil {
		return WriteResult{}, fmt.Errorf("authority: recover %s: %w", obj, err)
	}
	cur, found := v.Objects[obj.String()]
	res := WriteResult{Snapshot: cur, Found: found, OwnerAlive: v.Alive(old)}
	if !found || cur.StoreVersion != req.Seen.StoreVersion || res.OwnerAlive {
		return res, nil // it changed since it was seen, or its owner is alive: not written
	}
	all := make([]Snapshot, 0, len(objs))
	for _, o := range objs {
		sn, ok := v.Objects[o.String()]
		if !ok || sn.Record.Owner != old || (o.Kind == keyspace.KindActor && sn.Record.Group != g.String()) {
			return WriteResult{}, fmt.Errorf("%w: %s of %s is not the group's member on %s (%+v)", ErrInvalidRecord, o, g, old, sn.Record)
		}
		all = append(all, sn)
	}
	if obj.Kind != keyspace.KindGroup && !slices.Contains(gs.Record.Members, obj.String()) {
		return WriteResult{}, fmt.Errorf("%w: %s names %s, which does not list it", ErrInvalidRecord, obj, g)
	}
	planned := make([]Record, len(all))
	var cmps []clientv3.Cmp
	var puts []clientv3.Op
	for i, sn := range all {
		r := sn.Record
		r.Members = append([]string(nil), r.Members...)
		r.ObjectGeneration++
		r.OwnerGeneration++
		r.Owner, r.Node, r.State, r.Intent = req.NewOwner, req.Node, StateActive, nil
		planned[i] = r
		k := s.keys.Authority(sn.Object)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", sn.StoreVersion))
		puts = append(puts, clientv3.OpPut(k, string(r.Encode())))
	}
	oldKey, newKey := s.keys.Owner(old.ID), s.keys.Owner(req.NewOwner.ID)
	cmps = append(cmps,
		clientv3.Compare(clientv3.CreateRevision(oldKey), "!=", old.Generation),
		clientv3.Compare(clientv3.CreateRevision(newKey), "=", req.NewOwner.Generation))
	elses := []clientv3.Op{clientv3.OpGet(s.keys.Authority(obj)), clientv3.OpGet(oldKey)}
	if gd := req.Guard; gd != nil {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(gd.Key), "=", gd.CreateRevision))
		elses = append(elses, clientv3.OpGet(gd.Key))
	}
	resp, err := s.c.Txn(ctx).If(cmps...).Then(puts...).Else(elses...).Commit()
	idx := slices.IndexFunc(all, func(sn Snapshot) bool { return sn.Object == obj })
	if err != nil {
		rv, rerr := s.ReadMany(ctx, objs, []string{old.ID})
		if rerr != nil {
			return WriteResult{}, fmt.Errorf("%w: recover %s: %w (read-back: %w)", ErrUncertain, g, err, rerr)
		}
		written := true
		for i, sn := range all {
			c, ok := rv.Objects[sn.Object.String()]
			written = written && ok && bytes.Equal(c.Record.Encode(), planned[i].Encode())
		}
		c, ok := rv.Objects[obj.String()]
		return WriteResult{Written: written, Snapshot: c, Found: ok, OwnerAlive: rv.Alive(old), Resolved: true}, nil
	}
	if resp.Succeeded {
		rev := resp.Header.Revision
		return WriteResult{Written: true, Found: true, Snapshot: Snapshot{Object: obj, Record: planned[idx], StoreVersion: rev, Revision: rev}}, nil
	}
	rv, err := s.view(resp, []keyspace.Object{obj}, []string{old.ID}, 0)
	if err != nil {
		return WriteResult{}, err
	}
	c, ok := rv.Objects[obj.String()]
	out := WriteResult{Snapshot: c, Found: ok, OwnerAlive: rv.Alive(old)}
	if gd := req.Guard; gd != nil {
		kvs := resp.Responses[2].GetResponseRange().GetKvs()
		out.GuardLost = len(kvs) == 0 || kvs[0].CreateRevision != gd.CreateRevision
	}
	return out, nil
}
