package authority

import (
	"bytes"
	"context"
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
	resp, err := s.txn(ctx, "group").If(cmps...).Then(append(puts, extra...)...).Else(gets...).Commit()
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
		w.Resolved, w.NoSpace = true, !written && IsNoSpace(err)
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

func (req CommitRequest) plannedGroupBytes() []byte {
	g := req.plannedGroup()
	return g.Encode()
}

// WithMember returns members with m added, sorted (a copy): a group's
// Members after m joins.
func WithMember(members []string, m string) []string { return withMember(members, m) }

// ---------------------------------------------------------------- recover

// planGroupRecovery plans Recover of a group record or of one of its
// members: the group and every member are re-created on the new owner in
// one transaction, so a recovery never splits a group between owners.
//
//	If ModRevision(auth_i)=seen_i ∀ participants ∧ CreateRevision(owners/old)≠old.Generation ∧
//	   CreateRevision(owners/new)=new.Generation [∧ guard]
//	Then put every participant with objectGeneration+1, ownerGeneration+1, owned by new
//
// The catalog is not bumped: a group's records are never deleted
// (Deletable: a member leaves first), so a record's own object generation
// is what a later recovery or activation starts from, and a delete marks
// the record's generation, not the catalog's.
// The result is the requested object's (req.Seen's); a group that changed
// since req.Seen, or whose owner is alive, is decided without a write.
func (s *Store) planGroupRecovery(ctx context.Context, req RecoverRequest) (recoverPlan, error) {
	obj := req.Seen.Object
	g := obj
	if obj.Kind != keyspace.KindGroup {
		var err error
		if g, err = keyspace.ParseObject(req.Seen.Record.Group); err != nil || g.Kind != keyspace.KindGroup {
			return recoverPlan{}, fmt.Errorf("%w: %s names group %q", ErrInvalidRecord, obj, req.Seen.Record.Group)
		}
	}
	gs, err := s.Read(ctx, g)
	if err != nil {
		return recoverPlan{}, fmt.Errorf("authority: recover %s: its group: %w", obj, err)
	}
	objs := []keyspace.Object{g}
	for _, m := range gs.Record.Members {
		o, err := keyspace.ParseObject(m)
		if err != nil {
			return recoverPlan{}, fmt.Errorf("%w: %s lists %q", ErrInvalidRecord, g, m)
		}
		objs = append(objs, o)
	}
	old := gs.Record.Owner
	v, err := s.ReadMany(ctx, objs, []string{old.ID})
	if err != nil {
		return recoverPlan{}, fmt.Errorf("authority: recover %s: %w", obj, err)
	}
	cur, found := v.Objects[obj.String()]
	res := WriteResult{Snapshot: cur, Found: found, OwnerAlive: v.Alive(old)}
	if !found || cur.StoreVersion != req.Seen.StoreVersion || res.OwnerAlive {
		return recoverPlan{decided: true, res: res}, nil // it changed since it was seen, or its owner is alive: not written
	}
	all := make([]Snapshot, 0, len(objs))
	for _, o := range objs {
		sn, ok := v.Objects[o.String()]
		if !ok || sn.Record.Owner != old || (o.Kind == keyspace.KindActor && sn.Record.Group != g.String()) {
			return recoverPlan{}, fmt.Errorf("%w: %s of %s is not the group's member on %s (%+v)", ErrInvalidRecord, o, g, old, sn.Record)
		}
		all = append(all, sn)
	}
	if obj.Kind != keyspace.KindGroup && !slices.Contains(gs.Record.Members, obj.String()) {
		return recoverPlan{}, fmt.Errorf("%w: %s names %s, which does not list it", ErrInvalidRecord, obj, g)
	}
	p := recoverPlan{obj: obj, old: old, objs: objs, planned: make([]Record, len(all)), guard: req.Guard}
	p.idx = slices.IndexFunc(all, func(sn Snapshot) bool { return sn.Object == obj })
	for i, sn := range all {
		r := sn.Record
		r.Members = append([]string(nil), r.Members...)
		r.ObjectGeneration++
		r.AuthorityGeneration++
		r.Owner, r.Node, r.State, r.Intent = req.NewOwner, req.Node, StateActive, nil
		p.planned[i] = r
		k := s.keys.Authority(sn.Object)
		p.txn.cmps = append(p.txn.cmps, clientv3.Compare(clientv3.ModRevision(k), "=", sn.StoreVersion))
		p.txn.thens = append(p.txn.thens, clientv3.OpPut(k, string(r.Encode())))
	}
	oldKey, newKey := s.keys.Owner(old.ID), s.keys.Owner(req.NewOwner.ID)
	p.txn.cmps = append(p.txn.cmps,
		clientv3.Compare(clientv3.CreateRevision(oldKey), "!=", old.Generation),
		clientv3.Compare(clientv3.CreateRevision(newKey), "=", req.NewOwner.Generation))
	p.txn.elses = []clientv3.Op{clientv3.OpGet(s.keys.Authority(obj)), clientv3.OpGet(oldKey)}
	p.addGuard()
	return p, nil
}
