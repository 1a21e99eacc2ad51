package node

import (
	"context"
	"fmt"
	"time"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/node/groupcmd"
	"github.com/meshloc/meshloc/pkg/node/internal/hosted"
	"github.com/meshloc/meshloc/pkg/node/reloclog"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Actor Join (design.md §6; docs/seed-bugs.md bugs 24–28). An actor joining a
// group that lives on another node is relocated there: its owner (the source)
// runs a relocation whose PREPARE names the group, and the target's commit
// writes the membership with the move, in one transaction.
//
//   - The join answers its caller once READY is received (bug 24): from
//     then on the target commits, or the source preserves at the deadline.
//     The source's clean-up (CUTOVER, the settle read, then dropping its
//     copy; or reopening it after a winning preserve) runs later, in the
//     background, under a join profile.
//   - A failure before READY answers the caller with that failure (a
//     *JoinError) and the actor stays where it was, not in the group: the
//     source preserved and reopened it (bug 25).
//   - The profile is retired exactly once, after the clean-up ran, and only
//     then tombstoned (bug 26).
//   - Stop waits for the pending join clean-ups, bounded by its ctx, before
//     it stops relocations (bug 27); what is still pending then ends as
//     shutdown and is still retired once.
//   - After the commit the source's copy is detached: unhosted, its callers
//     redirected to the group's node (bug 28: Drop, internal/hosted).

// JoinError: an Actor Join ended before READY; the actor stayed where it
// was and is not a member. Status says how it ended.
type JoinError struct {
	Actor, Group string
	Status       *pb.RelocationStatus
}

func (e *JoinError) Error() string {
	st := e.Status
	return fmt.Sprintf("node: join of %s to %s ended before READY (%s, %s: %s); %s stays where it was, not a member",
		e.Actor, e.Group, st.GetOutcome(), wire.CodeName(st.GetCode()), st.GetMessage(), e.Actor)
}

// WireCode: the join ended before READY; the actor stays (wire.CodeOf).
func (e *JoinError) WireCode() pb.Code { return pb.Code_CODE_CONFLICT }

// JoinTombstone is a retired Actor Join, kept (bounded) for inspection.
type JoinTombstone = reloclog.JoinTombstone

// PendingJoins is the number of Actor Joins whose source clean-up has not
// been retired yet.
func (n *Node) PendingJoins() int { return n.joins.Pending() }

// RecentJoins lists the retired Actor Joins (oldest first, at most 256).
func (n *Node) RecentJoins() []JoinTombstone { return n.joins.Recent() }

// drainJoins waits, bounded by ctx, until every pending Actor Join's clean-up
// is retired (docs/seed-bugs.md bug 27): Stop calls it before it stops the
// relocations in flight, so a join answered at READY still ends as its commit
// or preserve decides.
func (n *Node) drainJoins(ctx context.Context) {
	if pending := n.joins.Drain(ctx); pending > 0 {
		n.log.Warn().Int("pending", pending).Msg("stop: Actor Join clean-ups still pending; they end as shutdown")
	}
}

// actorJoin relocates actor (this node's) to the node that owns the group
// and makes it a member there; it answers at READY (see the file comment).
func (n *Node) actorJoin(ctx context.Context, gs authority.Snapshot, as authority.Snapshot, timeout time.Duration) (*pb.GroupStatus, error) {
	if n.isClosing() {
		return nil, fmt.Errorf("%w: node %s is shutting down", ErrNoTarget, n.cfg.Name)
	}
	if err := n.limits().CheckGroup(n.keys, gs.Object.String(), len(gs.Record.Members)+1, nil); err != nil {
		return nil, err
	}
	target, err := n.joinTarget(gs, as.Object)
	for deadline := n.now().Add(2 * time.Second); err != nil && n.now().Before(deadline); {
		// The owner directory may be catching up (the group's node just
		// started, or its descriptor is being rewritten): look again after
		// its next change.
		n.awaitDirectory(ctx, 250*time.Millisecond)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		target, err = n.joinTarget(gs, as.Object)
	}
	if err != nil {
		return nil, err
	}
	h, err := n.holdActor(ctx, as.Object)
	if err != nil {
		return nil, err
	}
	// The record the relocation starts from, read with the actor held.
	snap, err := n.store.Read(ctx, as.Object)
	if err == nil && (snap.Record.Owner != n.self || snap.Record.Group != "" || snap.Record.State != record.StateActive) {
		err = fmt.Errorf("%w: %s changed before its join (owner %s, group %q)", ErrAlreadyRelocating, as.Object, snap.Record.Owner, snap.Record.Group)
	}
	if err != nil {
		n.releaseActor(h)
		return nil, err
	}
	r := n.newSource(as.Object, relocation.SourceConfig{Object: snap, JoinGroup: gs.Object.String()}, []*hosted.Object{h}, target, timeout, nil)
	id, rec, src := r.id, r.rec, r.machine
	p := reloclog.NewJoin(id, as.Object.String(), gs.Object.String())
	if !n.joins.Add(p, n.isClosing) {
		n.relocs.Untrack(rec)
		n.releaseActor(h)
		return nil, fmt.Errorf("%w: node %s is shutting down", ErrNoTarget, n.cfg.Name)
	}
	r.onReady = func() {
		rec.Set(func(s *pb.RelocationStatus) { s.Phase = src.Phase().String() })
		p.ResolveReady(rec.Snapshot(), nil)
	}
	go func() {
		defer n.joins.Ran()
		// Not the caller's ctx: the caller is answered at READY and leaves;
		// the run ends by its deadline, or as shutdown when the node stops.
		final := r.run()
		n.releaseActor(h)
		p.ResolveReady(nil, final) // ended before READY: the caller gets the failure (bug 25)
		n.joins.Retire(p, final)
		n.log.Debug().Str("relocation", id.String()).Str("object", p.Actor).Str("group", p.Group).Str("outcome", final.GetOutcome()).Msg("Actor Join retired")
	}()
	select {
	case <-p.Ready():
	case <-ctx.Done():
		return nil, fmt.Errorf("join of %s to %s: no READY yet (%w); the join goes on: see the relocation %s", as.Object, gs.Object, ctx.Err(), id)
	}
	atReady, failure := p.Outcome()
	if failure != nil {
		return nil, &JoinError{Actor: p.Actor, Group: p.Group, Status: failure}
	}
	st := groupcmd.Status(gs)
	st.Owner = target.Descriptor.OwnerID + fmt.Sprintf("@%d", target.Generation)
	st.Members = authority.WithMember(gs.Record.Members, as.Object.String())
	st.Relocation = atReady
	return st, nil
}
