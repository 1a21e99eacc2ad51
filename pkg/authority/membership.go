package authority

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/keyspace"
)

// A group's membership: Join and Leave, both records in one transaction
// (group.go holds the group's relocation writes).

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
	var catRev int64
	var last catalogEntry
	for range maxTxnRetries {
		a := Record{
			Kind: req.Actor.Kind, Type: req.Actor.Type, ObjectGeneration: last.LastObjectGeneration + 1, AuthorityGeneration: 1,
			Owner: req.Owner, Node: req.Node, State: StateActive, Group: req.Group.Object.String(), Deleted: last.Deleted,
			DeletedAtMs: last.DeletedAtMs,
		}
		cat := catalogEntry{LastObjectGeneration: a.ObjectGeneration, Deleted: last.Deleted, DeletedAtMs: last.DeletedAtMs}.encode()
		res, catResp, err := s.writeMembershipNew(ctx, req, g, a, catKey, catRev, cat)
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
