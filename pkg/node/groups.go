package node

import (
	"context"
	"fmt"
	"time"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node/groupcmd"
	"github.com/meshloc/meshloc/pkg/node/internal/hosted"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Groups (docs/design.md §2, §6). A group is an authority record group/<id>
// whose Members are actors; each member's record names the group. The
// group has no state and no instance: its owner is the node that owns every
// member. The membership is changed only by the group's owner, on both
// records in one transaction (pkg/authority group.go), and a group moves as
// one relocation: the group record and every member, one intent, one commit
// and one preserve transaction, so no revision ever shows its members split
// between owners.
//
// On a node, a per-group lock (groupLocks) serialises what changes a group
// it owns: Join, Leave, its relocation, and an incoming Actor Join's stage;
// a second one is refused at once with ErrGroupBusy, not queued.
//
// Calls to group/<id> itself: the method "members" is answered by any node
// from one etcd read of the group's record (no owner involved); any other
// method is UNKNOWN_METHOD. Calls to a member route like any actor's.

// Errors of group operations (the AdminService maps them to gRPC codes).
var (
	// ErrGroupBusy: another join, leave or relocation of the group runs on
	// its owner now; retry later.
	ErrGroupBusy = wire.Sentinel(pb.Code_CODE_CONFLICT, "node: group busy")
	// ErrGroupExists: CreateGroup of a group that has a record already.
	ErrGroupExists = wire.Sentinel(pb.Code_CODE_ALREADY_EXISTS, "node: group exists")
	// ErrGroupMember: a member of a group cannot be relocated alone (it
	// moves with its group); see GroupMemberError.
	ErrGroupMember = wire.Sentinel(pb.Code_CODE_NOT_OWNER, "node: object is a group member")
)

// GroupMemberError refuses the relocation of a group's member: relocate
// Group instead, or have the member leave it first.
type GroupMemberError struct {
	Object, Group string
}

func (e *GroupMemberError) Error() string {
	return fmt.Sprintf("node: %s is a member of %s and moves with it: relocate %s, or have it leave the group first", e.Object, e.Group, e.Group)
}

// Is makes errors.Is(err, ErrGroupMember) true.
func (e *GroupMemberError) Is(target error) bool { return target == ErrGroupMember }

// WireCode: a member is moved only with its group (wire.CodeOf).
func (e *GroupMemberError) WireCode() pb.Code { return pb.Code_CODE_NOT_OWNER }

// lockGroup takes the group's lock for why; ErrGroupBusy names the holder.
func (n *Node) lockGroup(group, why string) (release func(), err error) {
	release, holder, ok := n.groups.Lock(group, why)
	if !ok {
		return nil, fmt.Errorf("%w: %s: %s is in progress on %s", ErrGroupBusy, group, holder, n.self)
	}
	return release, nil
}

func (n *Node) limits() authority.Limits {
	return authority.Limits{MaxTxnOps: n.cfg.MaxTxnOps, MaxRequestBytes: n.cfg.MaxRequestBytes}
}

// CreateGroup creates group (group/<id>) owned by this node, with no
// members. A group that exists already is ErrGroupExists.
func (n *Node) CreateGroup(ctx context.Context, name string) (*pb.GroupStatus, error) {
	g, _, err := groupcmd.Parse(&pb.GroupCommand{Group: name}, false)
	if err != nil {
		return nil, err
	}
	if n.isClosing() {
		return nil, fmt.Errorf("%w: node %s is shutting down", ErrNoTarget, n.cfg.Name)
	}
	if n.cfg.Weight <= 0 {
		return nil, fmt.Errorf("%w: node %s has weight 0 (a pure gateway hosts no group)", ErrNoTarget, n.cfg.Name)
	}
	res, err := n.store.Activate(ctx, authority.ActivateRequest{Object: g, Owner: n.self, Node: n.selfNode})
	if err != nil {
		return nil, err
	}
	n.cache.Observe(res.Snapshot)
	if !res.Won {
		return nil, fmt.Errorf("%w: %s, owned by %s", ErrGroupExists, g, res.Snapshot.Record.Owner)
	}
	return groupcmd.Status(res.Snapshot), nil
}

func (n *Node) isClosing() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closing
}

// JoinGroup makes actor a member of group. This node must own the actor
// (or, for an actor with no record yet, the group: it is then created as a
// member). If the group lives here, one transaction writes both records; if
// it lives on another node, the actor is relocated there (Actor Join,
// join.go) and the answer comes once READY was received.
func (n *Node) JoinGroup(ctx context.Context, group, actor string, timeout time.Duration) (*pb.GroupStatus, error) {
	g, a, err := groupcmd.Parse(&pb.GroupCommand{Group: group, Actor: actor}, true)
	if err != nil {
		return nil, err
	}
	if err := n.validRelocation("", timeout); err != nil {
		return nil, err
	}
	if _, err := n.reg.Lookup(a.Type); err != nil {
		return nil, fmt.Errorf("%w: %v", authority.ErrInvalidRequest, err)
	}
	v, err := n.store.ReadMany(ctx, []keyspace.Object{g, a}, nil)
	if err != nil {
		return nil, err
	}
	gs, ok := v.Objects[g.String()]
	if !ok {
		return nil, fmt.Errorf("%w: %s", authority.ErrNotFound, g)
	}
	as, actorExists := v.Objects[a.String()]
	switch {
	case actorExists && as.Record.Group != "":
		return nil, fmt.Errorf("%w: %s is a member of %s", authority.ErrAlreadyMember, a, as.Record.Group)
	case !actorExists && gs.Record.Owner != n.self:
		return nil, fmt.Errorf("%w: %s has no record: send the join to the group's owner %s", ErrNotHosted, a, gs.Record.Owner)
	case actorExists && as.Record.Owner != n.self:
		return nil, fmt.Errorf("%w: %s is owned by %s: send the join to its owner", ErrNotHosted, a, as.Record.Owner)
	case actorExists && gs.Record.Owner != n.self:
		return n.actorJoin(ctx, gs, as, timeout)
	}
	return n.joinHere(ctx, gs, a, actorExists)
}

// joinHere writes the membership of an actor that is (or will be) on this
// node, like its group.
func (n *Node) joinHere(ctx context.Context, gs authority.Snapshot, a keyspace.Object, actorExists bool) (*pb.GroupStatus, error) {
	release, err := n.lockGroup(gs.Object.String(), "join of "+a.String())
	if err != nil {
		return nil, err
	}
	defer release()
	var h *hosted.Object
	if actorExists {
		// The actor must not be relocating: hold its relocation flag while
		// the membership changes (its record's compare catches the rest).
		if h, err = n.holdActor(ctx, a); err != nil {
			return nil, err
		}
		defer n.releaseActor(h)
	}
	// Read both again under the lock: the records the transaction compares.
	v, err := n.store.ReadMany(ctx, []keyspace.Object{gs.Object, a}, nil)
	if err != nil {
		return nil, err
	}
	gs, ok := v.Objects[gs.Object.String()]
	if !ok {
		return nil, fmt.Errorf("%w: %s", authority.ErrNotFound, gs.Object)
	}
	req := authority.MembershipRequest{Group: gs, Actor: a, Owner: n.self, Node: n.selfNode, Limits: n.limits()}
	if as, ok := v.Objects[a.String()]; ok {
		req.ActorSeen = &as
	} else if actorExists {
		return nil, fmt.Errorf("%w: %s vanished during the join", authority.ErrNotFound, a)
	}
	res, err := n.store.Join(ctx, req)
	if err != nil {
		return nil, err
	}
	if res.Written && req.ActorSeen == nil {
		n.hostJoined(res.Actor)
	}
	return n.membershipDone(res, "join")
}

// hostJoined hosts an actor that a join just created on this node, with
// its initial state: a record that names this node always has its
// instance here (activate.go relies on it: an instance missing for such a
// record means the recovery controller re-created it). A durable type
// loads its state from etcd when first called, as after any activation.
func (n *Node) hostJoined(snap authority.Snapshot) {
	typ, err := n.reg.Lookup(snap.Object.Type)
	if err != nil || typ.Durable {
		return
	}
	name := snap.Object.String()
	n.mu.Lock()
	if _, ok := n.objects[name]; ok || n.closing {
		n.mu.Unlock()
		return
	}
	h := hosted.New(n.env, snap.Object, n.typeRef(typ))
	n.objects[h.Name()] = h
	n.mu.Unlock()
	h.Install(snap)
	n.metrics.Activations.Inc()
	n.metrics.Hosted.Inc()
	h.MarkReady()
}

func (n *Node) membershipDone(res authority.MembershipResult, what string) (*pb.GroupStatus, error) {
	if res.GroupFound {
		n.cache.Observe(res.Group)
	}
	if res.ActorFound {
		n.cache.Observe(res.Actor)
	}
	if !res.Written {
		return nil, fmt.Errorf("%w: %s of %s in %s: the records changed during it (retry)", ErrGroupBusy, what, res.Actor.Object, res.Group.Object)
	}
	if h := n.hostedObject(res.Actor.Object.String()); h != nil {
		h.Mu.Lock()
		h.TakeRecordLocked(res.Actor)
		h.Mu.Unlock()
	}
	return groupcmd.Status(res.Group), nil
}

func (n *Node) hostedObject(name string) *hosted.Object {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.objects[name]
}

// holdActor returns the hosted actor (activating it from its record, which
// names this node, if it is not in memory) marked relocating, so that no
// relocation of it starts; releaseActor undoes it.
func (n *Node) holdActor(ctx context.Context, a keyspace.Object) (*hosted.Object, error) {
	typ, err := n.reg.Lookup(a.Type)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", authority.ErrInvalidRequest, err)
	}
	h, rep := n.hostedOrActivate(ctx, a, typ)
	if h == nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrNotHosted, a, rep.GetMessage())
	}
	return n.hold(ctx, h)
}

// holdHosted is holdActor for an object in memory here: nothing is
// activated.
func (n *Node) holdHosted(ctx context.Context, a keyspace.Object) (*hosted.Object, error) {
	h := n.hostedObject(a.String())
	if h == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotHosted, a)
	}
	return n.hold(ctx, h)
}

func (n *Node) hold(ctx context.Context, h *hosted.Object) (*hosted.Object, error) {
	if err := h.WaitAdmitted(ctx, n.clock); err != nil {
		return nil, err
	}
	h.Mu.Lock()
	defer h.Mu.Unlock()
	switch {
	case h.FailReply != nil || h.Closed:
		return nil, fmt.Errorf("%w: %s", ErrNotHosted, h.Name())
	case h.Relocating || h.Mode == hosted.ModeBoundary || h.Mode == hosted.ModeHold:
		// Held, or sealed by a relocation in flight (its group's, say).
		return nil, fmt.Errorf("%w: %s", ErrAlreadyRelocating, h.Name())
	case h.Mode != hosted.ModeServing:
		return nil, fmt.Errorf("%w: %s", ErrNotHosted, h.Name())
	}
	h.Relocating = true
	return h, nil
}

func (n *Node) releaseActor(h *hosted.Object) {
	h.Mu.Lock()
	h.Relocating = false
	h.Mu.Unlock()
	n.noteChange()
}

// LeaveGroup removes actor from group; this node must own the group.
func (n *Node) LeaveGroup(ctx context.Context, group, actor string) (*pb.GroupStatus, error) {
	g, a, err := groupcmd.Parse(&pb.GroupCommand{Group: group, Actor: actor}, true)
	if err != nil {
		return nil, err
	}
	release, err := n.lockGroup(g.String(), "leave of "+a.String())
	if err != nil {
		return nil, err
	}
	defer release()
	v, err := n.store.ReadMany(ctx, []keyspace.Object{g, a}, nil)
	if err != nil {
		return nil, err
	}
	gs, ok := v.Objects[g.String()]
	if !ok {
		return nil, fmt.Errorf("%w: %s", authority.ErrNotFound, g)
	}
	if gs.Record.Owner != n.self {
		return nil, fmt.Errorf("%w: %s is owned by %s: send the leave to its owner", ErrNotHosted, g, gs.Record.Owner)
	}
	as, ok := v.Objects[a.String()]
	if !ok {
		return nil, fmt.Errorf("%w: %s is not a member of %s (it has no record)", authority.ErrNotMember, a, g)
	}
	if h := n.hostedObject(a.String()); h != nil {
		if h, err = n.holdActor(ctx, a); err != nil {
			return nil, err
		}
		defer n.releaseActor(h)
	}
	res, err := n.store.Leave(ctx, authority.MembershipRequest{Group: gs, Actor: a, ActorSeen: &as, Owner: n.self, Node: n.selfNode})
	if err != nil {
		return nil, err
	}
	return n.membershipDone(res, "leave")
}

// ---------------------------------------------------------------- AdminService

func (s *adminServer) CreateGroup(ctx context.Context, c *pb.GroupCommand) (*pb.GroupStatus, error) {
	st, err := s.n.CreateGroup(ctx, c.GetGroup())
	return st, wire.StatusError(err)
}

func (s *adminServer) JoinGroup(ctx context.Context, c *pb.GroupCommand) (*pb.GroupStatus, error) {
	timeout, err := s.n.timeoutOfMs(c.GetTimeoutMs())
	if err != nil {
		return nil, wire.StatusError(err)
	}
	st, err := s.n.JoinGroup(ctx, c.GetGroup(), c.GetActor(), timeout)
	return st, wire.StatusError(err)
}

func (s *adminServer) LeaveGroup(ctx context.Context, c *pb.GroupCommand) (*pb.GroupStatus, error) {
	st, err := s.n.LeaveGroup(ctx, c.GetGroup(), c.GetActor())
	return st, wire.StatusError(err)
}
