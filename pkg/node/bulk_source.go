package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshloc/meshloc/pkg/node/internal/hosted"
	"github.com/meshloc/meshloc/pkg/node/reloclog"

	"github.com/meshloc/meshloc/internal/relocator"
	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Bulk moves (design.md §4, "Bulk moves"): actors leaving this node for
// one target share a stream and etcd requests, each still a relocation of
// its own (internal/relocator's BulkSource runs their machines). Drains
// and the rebalancer move objects this way.

// BulkOutcome is how one object of a bulk move ended.
type BulkOutcome struct {
	Object string
	// ID is its relocation's (zero: refused before anything was written).
	ID           wire.RelocationID
	Outcome      string // completed, aborted, failed, shutdown; OutcomeRefused
	Code         pb.Code
	Message      string
	Interruption time.Duration
	// Alone: refused because it moves only on its own (a group's member
	// moves with its group).
	Alone bool
}

// OutcomeRefused is the outcome of an object of a bulk move that was not
// started: nothing written, the object serving where it was (api's).
const OutcomeRefused = api.OutcomeRefused

// moveBulk moves the actors names to target as one bulk move and
// returns each one's outcome, in order. An object that is not an actor
// hosted and serving here, a group's member, or already relocating is
// refused alone; timeout bounds each relocation (0: RelocationTimeout).
func (n *Node) moveBulk(ctx context.Context, names []string, target lease.Owner, timeout time.Duration, skipPinned bool) []BulkOutcome {
	if timeout <= 0 {
		timeout = n.cfg.RelocationTimeout
	}
	out := make([]BulkOutcome, len(names))
	var held []*hosted.Object
	var idx []int
	var snaps []authority.Snapshot
	for i, name := range names {
		out[i] = BulkOutcome{Object: name, Outcome: OutcomeRefused}
		h, snap, err := n.holdForBulk(ctx, name, skipPinned)
		if err != nil {
			out[i].Code, out[i].Message = wire.CodeOf(err), err.Error()
			out[i].Alone = errors.As(err, new(*GroupMemberError))
			continue
		}
		held, idx, snaps = append(held, h), append(idx, i), append(snaps, snap)
	}
	if len(held) == 0 {
		return out
	}
	defer func() {
		for _, h := range held {
			n.releaseActor(h)
		}
	}()
	addr := target.Descriptor.Address
	bid := wire.NewRelocationID()
	rec := n.relocs.Track(&pb.RelocationStatus{RelocationId: bid[:], Object: "bulk", Source: n.self.String(),
		Target: fmt.Sprintf("%s@%d", target.Descriptor.OwnerID, target.Generation), Role: "source", Phase: "bulk",
		StartedUnixMs: n.now().UnixMilli(), BulkObjects: uint32(len(held))})
	defer n.relocs.Untrack(rec)
	deadline := n.now().Add(timeout)
	rctx, cancel := context.WithDeadline(n.life, deadline.Add(settleAfterDeadline))
	defer cancel()
	rctx, endTrace := reloclog.BulkTrace(rctx, reloclog.Parent(ctx), "source", len(held))
	defer endTrace()
	stopCtx, stopped := context.WithCancel(n.stopCtx)
	defer stopped()
	peer, err := n.peers.OpenBulk(rctx, addr)
	if err != nil {
		for _, i := range idx {
			out[i].Code, out[i].Message = pb.Code_CODE_UNAVAILABLE, "cannot reach the target: "+err.Error()
		}
		rec.Set(func(s *pb.RelocationStatus) {
			s.Outcome, s.Code, s.Message = "aborted", pb.Code_CODE_UNAVAILABLE, err.Error()
		})
		return out
	}
	tref := relocation.TargetRef{Owner: authority.OwnerRef{ID: target.Descriptor.OwnerID, Generation: target.Generation},
		Node: authority.NodeRef{RoutingID: target.Descriptor.RoutingID, Address: target.Descriptor.Address}}
	oneWrite := n.cfg.OneWriteBulk && target.Descriptor.BulkIntents // a target of an earlier version does not take it
	b := &relocator.BulkSource{Self: n.self, LeaseID: n.keeper.LeaseID(), Store: n.store, Lister: n.store, ID: bid.String(), Peer: peer, Watch: n.cache,
		Clock: n.clock, Budget: n.budgets.Chunk(addr), MaxBatchBytes: n.cfg.ChunkBytes, Stop: stopCtx.Done(), Target: tref.Owner,
		Out: &relocator.Outbox{}, Late: func(*pb.RelocationFrame) { n.metrics.LateFrames.Inc() }}
	reps := make([]*reloclog.BulkReporter, len(held))
	for k, h := range held {
		id := wire.NewRelocationID()
		m := relocation.NewSource(relocation.SourceConfig{ID: id, Object: snaps[k], Self: n.self, SelfRoutingID: n.rid,
			Target: tref, AppVersion: n.cfg.ApplicationVersion, DeadlineMs: deadline.UnixMilli(), ChunkSize: n.cfg.ChunkBytes,
			Nonce: wire.NewNonce(), EagerMaxBytes: n.cfg.EagerCutoverBytes, PrecopyMinBytes: -1, BulkIntent: oneWrite})
		mb := &hosted.SourceMailbox{Env: n.env, ID: id, Primary: h.Object(), Target: target.Descriptor.OwnerID, TargetGen: target.Generation, Units: []*hosted.Object{h}}
		store, unitPeer, mailbox := n.seams.source(mb, b.Out.Peer())
		reps[k] = reloclog.NewBulkReporter("source", n.relocMetrics, n.log, nil)
		out[idx[k]].ID = id
		b.Units = append(b.Units, relocator.BulkSourceUnit{Machine: m, Objects: []keyspace.Object{h.Object()}, Store: store,
			Mailbox: mailbox, Peer: unitPeer, Report: reps[k].CountingIn(rec)})
	}
	if oneWrite {
		b.Intents = n.store
	}
	b.Run(rctx)
	for k, i := range idx {
		r := reps[k]
		f := r.Finish()
		out[i].Outcome, out[i].Code, out[i].Message, out[i].Interruption = f.Outcome.String(), f.Code, f.Message, r.Interruption()
		if f.Outcome == 0 {
			out[i].Outcome, out[i].Code, out[i].Message = relocation.Shutdown.String(), pb.Code_CODE_SHUTTING_DOWN, "the bulk move ended before this relocation did"
		}
	}
	rec.Set(func(s *pb.RelocationStatus) {
		s.Phase, s.Outcome, s.EndedUnixMs = "done", "completed", n.now().UnixMilli()
	})
	return out
}

// holdForBulk takes one object for a bulk move: an actor hosted and
// serving here, not a group's member, not relocating, not pinned when
// skipPinned (held: relocating, until the caller releases it), and its
// record.
func (n *Node) holdForBulk(ctx context.Context, name string, skipPinned bool) (*hosted.Object, authority.Snapshot, error) {
	obj, err := keyspace.ParseObject(name)
	if err != nil {
		return nil, authority.Snapshot{}, err
	}
	if obj.Kind != keyspace.KindActor {
		return nil, authority.Snapshot{}, fmt.Errorf("%w: %s is a group: it moves alone", ErrInvalidRelocation, name)
	}
	h, err := n.holdHosted(ctx, obj)
	if err != nil {
		return nil, authority.Snapshot{}, err
	}
	snap, err := n.recordOf(ctx, h, obj)
	switch {
	case err != nil:
	case snap.Record.Owner != n.self:
		err = fmt.Errorf("%w: %s is owned by %s", ErrNotHosted, obj, snap.Record.Owner)
	case snap.Record.Group != "":
		err = &GroupMemberError{Object: name, Group: snap.Record.Group}
	case skipPinned && snap.Record.Pinned:
		err = fmt.Errorf("%w: %s is pinned: it moves only when named alone", ErrAlreadyRelocating, name)
	}
	if err != nil {
		n.releaseActor(h)
		return nil, authority.Snapshot{}, err
	}
	return h, snap, nil
}
