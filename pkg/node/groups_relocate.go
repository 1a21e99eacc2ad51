package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node/internal/hosted"
	"github.com/meshloc/meshloc/pkg/node/reloclog"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/relocation"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Calls to a group and a group's relocation from its owner (see groups.go).

// ---------------------------------------------------------------- calls to a group

// callGroup answers a call to group/<id> itself: "members" from one etcd
// read of its record (any node answers; the reply carries the group's
// fence), anything else UNKNOWN_METHOD.
func (n *Node) callGroup(ctx context.Context, g keyspace.Object, req *pb.CallRequest) *pb.CallReply {
	if req.GetMethod() != "members" || len(req.GetArgs()) != 0 {
		return &pb.CallReply{Code: pb.Code_CODE_UNKNOWN_METHOD, Message: fmt.Sprintf("a group answers only \"members\" (no arguments); call its member actors for the rest (got %q with %d arguments)", req.GetMethod(), len(req.GetArgs()))}
	}
	rctx, cancel := context.WithTimeout(ctx, n.cfg.CallTimeout)
	defer cancel()
	snap, err := n.store.Read(rctx, g)
	switch {
	case errors.Is(err, authority.ErrNotFound):
		return &pb.CallReply{Code: pb.Code_CODE_NOT_FOUND, Message: g.String() + " does not exist"}
	case err != nil:
		return &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE, Message: "read " + g.String() + ": " + err.Error()}
	}
	members := snap.Record.Members
	if members == nil {
		members = []string{}
	}
	out, _ := json.Marshal(struct {
		Group   string   `json:"group"`
		Owner   string   `json:"owner"`
		Members []string `json:"members"`
	}{g.String(), snap.Record.Owner.String(), members})
	return &pb.CallReply{Code: pb.Code_CODE_OK, Payload: out, Fence: n.wireFence(snap.Fence(), snap.StoreVersion, snap.Record.Node.RoutingID)}
}

// ---------------------------------------------------------------- group relocation (source)

// groupRecords are the records a relocation of group g plans from: the
// group's as the location cache last saw it and each member's as it
// serves here, when all are current for the cache (no read of etcd; a
// write the cache has not seen fails the intent's compare, as for an
// actor); otherwise read from etcd, the group and then, in one range of
// reads, the group with its members. The group must be this node's and
// active, and small enough for its transactions.
func (n *Node) groupRecords(ctx context.Context, g keyspace.Object) (authority.Snapshot, []authority.Snapshot, error) {
	if gs, ok := n.cache.Group(g.String()); ok && n.ownsGroup(gs) == nil {
		if members, ok := n.servedMembers(gs); ok {
			if err := n.limits().CheckGroup(n.keys, g.String(), len(members), nil); err != nil {
				return authority.Snapshot{}, nil, err
			}
			n.metrics.Plans.WithLabelValues("cache").Inc()
			return gs, members, nil
		}
	}
	n.metrics.Plans.WithLabelValues("etcd").Inc()
	gs, err := n.store.Read(ctx, g)
	if err != nil {
		return gs, nil, err
	}
	if err := n.ownsGroup(gs); err != nil {
		return gs, nil, err
	}
	// Size first: nothing is written for a group its transactions cannot carry.
	if err := n.limits().CheckGroup(n.keys, g.String(), len(gs.Record.Members), nil); err != nil {
		return gs, nil, err
	}
	objs, err := memberObjects(gs)
	if err != nil {
		return gs, nil, err
	}
	v, err := n.store.ReadMany(ctx, append([]keyspace.Object{g}, objs...), nil)
	if err != nil {
		return gs, nil, err
	}
	gs, ok := v.Objects[g.String()]
	if !ok || n.ownsGroup(gs) != nil || len(gs.Record.Members) != len(objs) {
		return gs, nil, fmt.Errorf("%w: %s changed while its relocation was planned", ErrAlreadyRelocating, g)
	}
	members := make([]authority.Snapshot, 0, len(objs))
	for _, o := range objs {
		ms, ok := v.Objects[o.String()]
		if !ok {
			return gs, nil, fmt.Errorf("%w: member %s of %s has no record", ErrNotHosted, o, g)
		}
		members = append(members, ms)
	}
	return gs, members, nil
}

// ownsGroup: gs names this node as the owner of an active group.
func (n *Node) ownsGroup(gs authority.Snapshot) error {
	if gs.Record.Owner != n.self || gs.Record.State != record.StateActive {
		return fmt.Errorf("%w: %s is owned by %s (%s)", ErrNotHosted, gs.Object, gs.Record.Owner, gs.Record.State)
	}
	return nil
}

// memberObjects are the members gs lists, each an actor.
func memberObjects(gs authority.Snapshot) ([]keyspace.Object, error) {
	objs := make([]keyspace.Object, 0, len(gs.Record.Members))
	for _, m := range gs.Record.Members {
		o, err := keyspace.ParseObject(m)
		if err != nil || o.Kind != keyspace.KindActor {
			return nil, fmt.Errorf("%w: %s lists member %q", authority.ErrInvalidRecord, gs.Object, m)
		}
		objs = append(objs, o)
	}
	return objs, nil
}

// servedMembers are the records gs's members serve under here, each
// current for the location cache; false when one is not hosted here or
// its record is not known current.
func (n *Node) servedMembers(gs authority.Snapshot) ([]authority.Snapshot, bool) {
	objs, err := memberObjects(gs)
	if err != nil {
		return nil, false
	}
	members := make([]authority.Snapshot, 0, len(objs))
	for _, o := range objs {
		h := n.hostedObject(o.String())
		if h == nil {
			return nil, false
		}
		s, ok := n.servedRecord(h)
		if !ok {
			return nil, false
		}
		members = append(members, s)
	}
	return members, true
}

// relocateGroup moves a group this node owns, with every member, as one
// relocation (Relocate dispatches here for group/<id>, admitted for units:
// 0 for a foreground one).
func (n *Node) relocateGroup(ctx context.Context, g keyspace.Object, opts RelocateOptions, units float64) (*pb.RelocationStatus, error) {
	release, err := n.lockGroup(g.String(), "relocation")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAlreadyRelocating, err)
	}
	defer release()
	gs, members, err := n.groupRecords(ctx, g)
	if err != nil {
		return nil, err
	}
	all := append([]authority.Snapshot{gs}, members...)
	types := map[string]bool{}
	for _, ms := range members {
		if ms.Record.Owner != n.self || ms.Record.Group != g.String() || ms.Record.State != record.StateActive {
			return nil, fmt.Errorf("%w: member %s of %s is not this node's active member (%+v)", ErrNotHosted, ms.Object, g, ms.Record)
		}
		types[ms.Object.Type] = true
	}
	if err := n.limits().CheckGroup(n.keys, g.String(), len(members), all); err != nil {
		return nil, err
	}
	// Host every member (a member never called yet is activated from its
	// record, which names this node) and hold it: no other relocation of
	// it starts, and it is sealed with the others.
	var hs []*hosted.Object
	defer func() {
		for _, h := range hs {
			n.releaseActor(h)
		}
	}()
	for _, ms := range members {
		h, err := n.holdActor(ctx, ms.Object)
		if err != nil {
			return nil, err
		}
		hs = append(hs, h)
	}
	ts := make([]string, 0, len(types))
	for t := range types {
		ts = append(ts, t)
	}
	target, err := n.pickTarget(ctx, opts.Target, ts...)
	if err != nil {
		return nil, err
	}
	held := hs
	hs = nil // released by launch
	r := n.newSource(g, relocation.SourceConfig{Object: gs, Members: members, PrecopyMinBytes: noPrecopy(opts)}, held, target, opts.Timeout, opts.paced)
	r.units, r.parent = units, reloclog.Parent(ctx)
	return n.launch(r, opts.Detach, func() {
		for _, h := range held {
			n.releaseActor(h)
		}
	}), nil
}
