package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/relocation"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Groups (DESIGN.md §2, §6). A group is an authority record group/<id>
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
	ErrGroupBusy = errors.New("node: group busy")
	// ErrGroupExists: CreateGroup of a group that has a record already.
	ErrGroupExists = errors.New("node: group exists")
	// ErrGroupMember: a member of a group cannot be relocated alone (it
	// moves with its group); see GroupMemberError.
	ErrGroupMember = errors.New("node: object is a group member")
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

// groupLocks are the per-group locks of this node.
type groupLocks struct {
	mu   sync.Mutex
	busy map[string]string // group → what holds it
}

// lockGroup takes the group's lock for why; ErrGroupBusy names the holder.
func (n *Node) lockGroup(group, why string) (release func(), err error) {
	l := &n.groups
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy == nil {
		l.busy = map[string]string{}
	}
	if h, ok := l.busy[group]; ok {
		return nil, fmt.Errorf("%w: %s: %s is in progress on %s", ErrGroupBusy, group, h, n.self)
	}
	l.busy[group] = why
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			delete(l.busy, group)
			l.mu.Unlock()
		})
	}, nil
}

func (n *Node) limits() authority.Limits {
	return authority.Limits{MaxTxnOps: n.cfg.MaxTxnOps, MaxRequestBytes: n.cfg.MaxRequestBytes}
}

// parseGroupCommand checks the names of a GroupCommand.
func parseGroupCommand(c *pb.GroupCommand, needActor bool) (group, actor keyspace.Object, err error) {
	group, err = keyspace.ParseObject(c.GetGroup())
	if err != nil {
		return group, actor, err
	}
	if group.Kind != keyspace.KindGroup {
		return group, actor, fmt.Errorf("%w: %q is not a group (want group/<id>)", keyspace.ErrInvalidName, c.GetGroup())
	}
	if !needActor {
		if c.GetActor() != "" {
			return group, actor, fmt.Errorf("%w: create takes no actor", authority.ErrInvalidRequest)
		}
		return group, actor, nil
	}
	actor, err = keyspace.ParseObject(c.GetActor())
	if err != nil {
		return group, actor, err
	}
	if actor.Kind != keyspace.KindActor {
		return group, actor, fmt.Errorf("%w: %q is not an actor (want actor/<type>/<id>): groups do not nest", keyspace.ErrInvalidName, c.GetActor())
	}
	return group, actor, nil
}

func groupStatus(s authority.Snapshot) *pb.GroupStatus {
	return &pb.GroupStatus{Group: s.Object.String(), Owner: s.Record.Owner.String(), Members: append([]string{}, s.Record.Members...), StoreVersion: s.StoreVersion}
}

// CreateGroup creates group (group/<id>) owned by this node, with no
// members. A group that exists already is ErrGroupExists.
func (n *Node) CreateGroup(ctx context.Context, name string) (*pb.GroupStatus, error) {
	g, _, err := parseGroupCommand(&pb.GroupCommand{Group: name}, false)
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
	return groupStatus(res.Snapshot), nil
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
	g, a, err := parseGroupCommand(&pb.GroupCommand{Group: group, Actor: actor}, true)
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
	var h *hosted
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
// instance here (recovered.go relies on it: an instance missing for such a
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
	h := newHosted(n, snap.Object, typ)
	n.objects[name] = h
	n.mu.Unlock()
	h.install(snap)
	n.metrics.activations.Inc()
	n.metrics.hosted.Inc()
	close(h.ready)
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
		h.mu.Lock()
		h.fence, h.version = res.Actor.Fence(), res.Actor.StoreVersion
		h.mu.Unlock()
	}
	return groupStatus(res.Group), nil
}

func (n *Node) hostedObject(name string) *hosted {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.objects[name]
}

// holdActor returns the hosted actor (activating it from its record, which
// names this node, if it is not in memory) marked relocating, so that no
// relocation of it starts; releaseActor undoes it.
func (n *Node) holdActor(ctx context.Context, a keyspace.Object) (*hosted, error) {
	typ, err := n.reg.Lookup(a.Type)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", authority.ErrInvalidRequest, err)
	}
	h, rep := n.hostedOrActivate(ctx, a, typ)
	if h == nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrNotHosted, a, rep.GetMessage())
	}
	if err := n.waitAdmitted(ctx, h); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.failReply != nil || h.closed || h.mode != modeServing:
		return nil, fmt.Errorf("%w: %s", ErrNotHosted, a)
	case h.relocating:
		return nil, fmt.Errorf("%w: %s", ErrAlreadyRelocating, a)
	}
	h.relocating = true
	return h, nil
}

func (n *Node) releaseActor(h *hosted) {
	h.mu.Lock()
	h.relocating = false
	h.mu.Unlock()
}

// waitAdmitted waits (bounded) until an object that just arrived here is
// admitted by its target stage.
func (n *Node) waitAdmitted(ctx context.Context, h *hosted) error {
	select {
	case <-h.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	for wait := time.Now().Add(2 * time.Second); ; {
		h.mu.Lock()
		hidden := h.mode == modeHidden && !h.closed
		h.mu.Unlock()
		if !hidden || time.Now().After(wait) {
			return nil
		}
		if !sleepCtx(ctx, 5*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// LeaveGroup removes actor from group; this node must own the group.
func (n *Node) LeaveGroup(ctx context.Context, group, actor string) (*pb.GroupStatus, error) {
	g, a, err := parseGroupCommand(&pb.GroupCommand{Group: group, Actor: actor}, true)
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

// relocateGroup moves a group this node owns, with every member, as one
// relocation (Relocate dispatches here for group/<id>).
func (n *Node) relocateGroup(ctx context.Context, g keyspace.Object, opts RelocateOptions) (*pb.RelocationStatus, error) {
	release, err := n.lockGroup(g.String(), "relocation")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAlreadyRelocating, err)
	}
	defer release()
	gs, err := n.store.Read(ctx, g)
	if err != nil {
		return nil, err
	}
	if gs.Record.Owner != n.self || gs.Record.State != record.StateActive {
		return nil, fmt.Errorf("%w: %s is owned by %s (%s)", ErrNotHosted, g, gs.Record.Owner, gs.Record.State)
	}
	// Size first: nothing is written for a group its transactions cannot carry.
	if err := n.limits().CheckGroup(n.keys, g.String(), len(gs.Record.Members), nil); err != nil {
		return nil, err
	}
	objs := []keyspace.Object{g}
	for _, m := range gs.Record.Members {
		o, err := keyspace.ParseObject(m)
		if err != nil || o.Kind != keyspace.KindActor {
			return nil, fmt.Errorf("%w: %s lists member %q", authority.ErrInvalidRecord, g, m)
		}
		objs = append(objs, o)
	}
	v, err := n.store.ReadMany(ctx, objs, nil)
	if err != nil {
		return nil, err
	}
	gs, ok := v.Objects[g.String()]
	if !ok || gs.Record.Owner != n.self || gs.Record.State != record.StateActive || len(gs.Record.Members) != len(objs)-1 {
		return nil, fmt.Errorf("%w: %s changed while its relocation was planned", ErrAlreadyRelocating, g)
	}
	all := []authority.Snapshot{gs}
	var members []authority.Snapshot
	types := map[string]bool{}
	for _, o := range objs[1:] {
		ms, ok := v.Objects[o.String()]
		if !ok || ms.Record.Owner != n.self || ms.Record.Group != g.String() || ms.Record.State != record.StateActive {
			return nil, fmt.Errorf("%w: member %s of %s is not this node's active member (%+v)", ErrNotHosted, o, g, ms.Record)
		}
		members = append(members, ms)
		all = append(all, ms)
		types[o.Type] = true
	}
	if err := n.limits().CheckGroup(n.keys, g.String(), len(members), all); err != nil {
		return nil, err
	}
	// Host every member (a member never called yet is activated from its
	// record, which names this node) and hold it: no other relocation of
	// it starts, and it is sealed with the others.
	var hs []*hosted
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
	target, err := n.chooseGroupTarget(types, opts.Target)
	if errors.Is(err, ErrNoTarget) {
		t := time.NewTimer(time.Second)
		select {
		case <-n.dir.Changed():
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		target, err = n.chooseGroupTarget(types, opts.Target)
	}
	if err != nil {
		return nil, err
	}
	r := n.newSourceRun(g, relocation.SourceConfig{Object: gs, Members: members}, target, opts.Timeout)
	defer n.untrack(r.rec)
	r.members = hs
	r.run(ctx)
	return r.rec.snapshot(), nil
}

// chooseGroupTarget is chooseTarget for a group: the target must host every
// member's type.
func (n *Node) chooseGroupTarget(types map[string]bool, want string) (lease.Owner, error) {
	var cands []lease.Owner
	total := 0
	for _, o := range n.dir.List() {
		d := o.Descriptor
		if d.OwnerID == n.self.ID || d.State != lease.StateServing || d.Weight <= 0 || d.ApplicationVersion != n.cfg.ApplicationVersion {
			continue
		}
		if want != "" && d.OwnerID != want {
			continue
		}
		all := true
		for t := range types {
			all = all && hostsType(d.Types, t)
		}
		if !all {
			continue
		}
		cands = append(cands, o)
		total += d.Weight
	}
	if len(cands) == 0 {
		ts := make([]string, 0, len(types))
		for t := range types {
			ts = append(ts, t)
		}
		slices.Sort(ts)
		if want != "" {
			return lease.Owner{}, fmt.Errorf("%w: %s is not a live serving node that hosts the group's types %v (and is not this node)", ErrNoTarget, want, ts)
		}
		return lease.Owner{}, fmt.Errorf("%w for a group of types %v", ErrNoTarget, ts)
	}
	x := rand.IntN(total)
	for _, c := range cands {
		if x -= c.Descriptor.Weight; x < 0 {
			return c, nil
		}
	}
	return cands[len(cands)-1], nil
}

// units are the hosted objects a source run moves: its object, or a
// group's members (in participant order).
func (r *sourceRun) units() []*hosted {
	if r.h != nil {
		return []*hosted{r.h}
	}
	return r.members
}

// objects are the participants the settle read covers.
func (r *sourceRun) objects() []keyspace.Object {
	out := []keyspace.Object{r.primary}
	if r.h == nil {
		for _, h := range r.members {
			out = append(out, h.obj)
		}
	}
	return out
}

// sealAll seals and captures what the run moves. For a group (seed bug 22)
// every member stops dispatch first, then the handlers in progress are
// awaited, then every member is captured; a failure anywhere is rolled
// back for all of them by the machine's Preserve → Reopen, which puts each
// member's captured and boundary requests back in the order accepted.
func (r *sourceRun) sealAll(ctx context.Context) ([][]byte, error) {
	n := r.n
	if r.h != nil {
		return n.seal(ctx, r.h, r.id, r.target.Descriptor.OwnerID)
	}
	waits := make([]chan struct{}, len(r.members))
	for i, h := range r.members {
		waits[i] = sealStart(h)
	}
	for _, w := range waits {
		if err := waitSealed(ctx, w); err != nil {
			return nil, err
		}
	}
	g := r.m.Participants()[0]
	pss := []*pb.ParticipantState{{Participant: &pb.Participant{Object: g.Object.String(), ObjectGeneration: g.Record.ObjectGeneration,
		AuthorityGeneration: g.Record.OwnerGeneration, StoreVersion: g.StoreVersion}}}
	states := [][]byte{nil}
	for _, h := range r.members {
		ps, st, err := n.capture(h, r.target.Descriptor.OwnerID)
		if err != nil {
			return nil, err
		}
		pss = append(pss, ps)
		states = append(states, st)
	}
	return relocation.EncodeEnvelope(r.id, pss, states)
}

// lastKnown is the run's latest record of a member (a write or settle read).
func (r *sourceRun) lastKnown(name string) (record.Snapshot, bool) {
	for _, p := range r.m.Participants() {
		if p.Object.String() == name {
			return p, true
		}
	}
	return record.Snapshot{}, false
}

// reopenAll puts every moved object back in service after a winning preserve.
func (r *sourceRun) reopenAll(a relocation.Reopen) {
	if r.h != nil {
		r.n.reopen(r.h, a.Record)
		return
	}
	r.n.cache.Observe(a.Record)
	for _, h := range r.members {
		rec, ok := a.Members[h.name]
		if !ok {
			rec, _ = r.lastKnown(h.name)
		}
		r.n.reopen(h, rec)
	}
}

// dropAll discards the moved objects after the target committed. For a
// group the DATA requests were sent member by member (sendBoundary), so
// the first DataApplied of them are each member's first ones.
func (r *sourceRun) dropAll(a relocation.Drop) {
	n := r.n
	if r.h != nil {
		n.drop(r.h, a.Committed, a.DataApplied)
		return
	}
	n.cache.Observe(a.Committed)
	left := a.DataApplied
	for i, h := range r.members {
		applied := 0
		if i < len(r.counts) {
			applied = min(left, r.counts[i])
			left -= applied
		}
		rec, ok := a.Members[h.name]
		if !ok || rec.Record.Owner == n.self {
			// Not in the read (or not moved?): the commit moved every
			// participant at once, so its record is the planned one.
			last, _ := r.lastKnown(h.name)
			rec = authority.Snapshot{Object: h.obj, StoreVersion: a.Committed.StoreVersion, Revision: a.Committed.Revision,
				Record: authority.Planned(authority.Participant{Expected: last}, a.Committed.Record.Owner, a.Committed.Record.Node, r.id.String())}
		}
		n.drop(h, rec, applied)
	}
}

// ---------------------------------------------------------------- group and join stages (target)

// checkEnvelope checks, before anything is staged, that the envelope
// carries exactly PREPARE's participants in order, and admits an Actor
// Join: the group must be this node's, active and not full, and is locked
// for this stage until it ends.
func (r *targetRun) checkEnvelope(env *pb.Envelope) error {
	p := r.m.Prepare()
	if len(env.GetParticipants()) != len(p.GetParticipants()) {
		return fmt.Errorf("%w: the payload carries %d participants, PREPARE %d", relocation.ErrProtocol, len(env.GetParticipants()), len(p.GetParticipants()))
	}
	for i, ps := range env.GetParticipants() {
		if got, want := ps.GetParticipant().GetObject(), p.GetParticipants()[i].GetObject(); got != want {
			return fmt.Errorf("%w: payload participant %d is %q, PREPARE's %q", relocation.ErrProtocol, i, got, want)
		}
		if k := splitKind(ps.GetParticipant().GetObject()); k == keyspace.KindGroup && (ps.GetStateLength() != 0 || len(ps.GetQueued()) != 0) {
			return fmt.Errorf("%w: group participant %s carries state", relocation.ErrProtocol, ps.GetParticipant().GetObject())
		}
	}
	j := p.GetJoinGroup()
	if j == "" {
		return nil
	}
	return r.admitJoin(j, p.GetParticipants()[0].GetObject())
}

func (r *targetRun) admitJoin(group, actor string) error {
	n := r.n
	g, err := keyspace.ParseObject(group)
	if err != nil {
		return fmt.Errorf("%w: %v", relocation.ErrProtocol, err)
	}
	release, err := n.lockGroup(group, "Actor Join of "+actor)
	if err != nil {
		return &relocation.RefusedError{Code: pb.Code_CODE_RELOCATING, Message: err.Error()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gs, err := n.store.Read(ctx, g)
	switch {
	case errors.Is(err, authority.ErrNotFound):
		release()
		return &relocation.RefusedError{Code: pb.Code_CODE_NOT_FOUND, Message: group + " does not exist"}
	case err != nil:
		release()
		return &relocation.RefusedError{Code: pb.Code_CODE_UNAVAILABLE, Message: "read " + group + ": " + err.Error()}
	case gs.Record.Owner != n.self || gs.Record.State != record.StateActive:
		release()
		return &relocation.RefusedError{Code: pb.Code_CODE_STALE_FENCE, Message: fmt.Sprintf("%s is owned by %s (%s), not by %s", group, gs.Record.Owner, gs.Record.State, n.self)}
	}
	if err := n.limits().CheckGroup(n.keys, group, len(gs.Record.Members)+1, nil); err != nil {
		release()
		return &relocation.RefusedError{Code: pb.Code_CODE_INVALID_ARGUMENT, Message: err.Error()}
	}
	r.release = append(r.release, release)
	return nil
}

// joinGroup is the group record an Actor Join's commit compares: read now
// (this stage holds the group's lock), or, to resolve an uncertain commit,
// the one that commit used.
func (r *targetRun) joinGroup(ctx context.Context, g keyspace.Object, resolve bool) (authority.Snapshot, error) {
	if resolve && r.joinSeen != nil {
		return *r.joinSeen, nil
	}
	gs, err := r.n.store.Read(ctx, g)
	if err != nil {
		return authority.Snapshot{}, err
	}
	r.joinSeen = &gs
	return gs, nil
}

// ---------------------------------------------------------------- AdminService

func (s *adminServer) CreateGroup(ctx context.Context, c *pb.GroupCommand) (*pb.GroupStatus, error) {
	st, err := s.n.CreateGroup(ctx, c.GetGroup())
	return st, groupRPCError(err)
}

func (s *adminServer) JoinGroup(ctx context.Context, c *pb.GroupCommand) (*pb.GroupStatus, error) {
	timeout, err := s.n.timeoutOfMs(c.GetTimeoutMs())
	if err != nil {
		return nil, groupRPCError(err)
	}
	st, err := s.n.JoinGroup(ctx, c.GetGroup(), c.GetActor(), timeout)
	return st, groupRPCError(err)
}

func (s *adminServer) LeaveGroup(ctx context.Context, c *pb.GroupCommand) (*pb.GroupStatus, error) {
	st, err := s.n.LeaveGroup(ctx, c.GetGroup(), c.GetActor())
	return st, groupRPCError(err)
}

// groupRPCError is the one table from group errors to gRPC codes:
// InvalidArgument (bad names), NotFound (no such group), FailedPrecondition
// (not this node's: ask the owner), AlreadyExists (create twice),
// ResourceExhausted (the group's size limit), Aborted (membership conflict,
// busy, a join that ended before READY), Unavailable (no target, etcd).
func groupRPCError(err error) error {
	var je *JoinError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, keyspace.ErrInvalidName), errors.Is(err, authority.ErrInvalidRequest), errors.Is(err, ErrInvalidRelocation):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, authority.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, authority.ErrGroupTooLarge):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, ErrGroupExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, ErrNotHosted):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, authority.ErrAlreadyMember), errors.Is(err, authority.ErrNotMember), errors.Is(err, authority.ErrNotGroupOwner),
		errors.Is(err, ErrGroupBusy), errors.Is(err, ErrAlreadyRelocating), errors.As(err, &je):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, ErrNoTarget):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}
