package node

import (
	"context"
	"fmt"

	"github.com/meshloc/meshloc/pkg/node/peers"
	"github.com/meshloc/meshloc/pkg/node/stages"

	"github.com/meshloc/meshloc/pkg/mtls"

	"github.com/meshloc/meshloc/pkg/node/reloclog"

	"github.com/meshloc/meshloc/internal/prefault"
	"github.com/meshloc/meshloc/internal/relocator"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Relocate (PeerService) is the target side of one relocation attempt:
// what the node knows before the stage starts (a tombstone, its bounds on
// stages, TLS's peer), then the relocator's target run.
func (s *peerServer) Relocate(stream rpcpb.PeerService_RelocateServer) error {
	n := s.n
	if err := n.pacing.Admit(stream, n.cfg.RelocationTimeout/2, n.BackgroundRate); err != nil {
		return err // a background relocation this node's pacing did not admit: nothing was received
	}
	peer := n.seams.targetPeer(peers.ServeRelocation(stream))
	first, err := peer.Recv()
	if err != nil {
		return err
	}
	p := first.GetPrepare()
	if p == nil {
		n.metrics.LateFrames.Inc()
		return errProtocol("the first frame of a relocation stream must be PREPARE")
	}
	if _, err := wire.ParseRelocationIDBytes(p.GetRelocationId()); err != nil {
		return errProtocol(err.Error())
	}
	ev := relocation.PrepareEvent{Prepare: p, NowMs: n.now().UnixMilli(), Draining: n.draining.Load()}
	var sendErr error
	st := n.newStage(stream.Context(), ev, false, func(f *pb.RelocationFrame) { sendErr = peer.Send(f) })
	if st == nil {
		return sendErr // refused, or answered from a tombstone: nothing was staged
	}
	rec := n.relocs.Track(st.status(n))
	defer n.relocs.Untrack(rec)
	defer st.end()
	rep := reloclog.NewTargetReporter(rec, n.relocMetrics, n.log, n.now, st.m.SealedUnixUs)
	if st.err != nil {
		rep.Failed(st.err)
	}
	t := &relocator.Target{
		Machine: st.m, Self: n.self, Node: n.selfNode,
		Store: st.store, Peer: peer, Mailbox: st.mailbox,
		Report: rep, Clock: n.clock, Draining: n.draining.Load, Stop: n.stopping,
	}
	ctx := rep.Trace(n.life, reloclog.Parent(stream.Context()), p.GetCoordinator().GetOwnerId(), n.self.String())
	defer rep.EndTrace()
	t.Run(ctx, st.first)
	return nil
}

// stage is a target stage the node admitted: its machine (which took the
// PREPARE), the machine's first actions, and its seams.
type stage struct {
	key     stages.Key
	p       *pb.Prepare
	m       *relocation.Target
	first   []relocation.Action
	err     error // the machine's refusal of the PREPARE, if any
	store   relocator.Store
	mailbox relocator.TargetMailbox
	mb      *targetMailbox
	release func()
}

// newStage is the one way a target stage starts, on a stream of its own or
// in a bulk move: a PREPARE whose relocation ended here is answered from its
// tombstone; one beyond the node's bounds on stages, or staged already,
// is refused; otherwise the machine takes it. A refused or answered PREPARE
// returns nil, its answer sent through send, and nothing staged. bulk says
// the stage is one relocation of a bulk move.
func (n *Node) newStage(ctx context.Context, ev relocation.PrepareEvent, bulk bool, send func(*pb.RelocationFrame)) *stage {
	p := ev.Prepare
	id, err := wire.ParseRelocationIDBytes(p.GetRelocationId())
	if err != nil {
		send(&pb.RelocationFrame{Frame: &pb.RelocationFrame_Failed{Failed: &pb.Failed{Code: pb.Code_CODE_PROTOCOL_ERROR, Message: err.Error()}}})
		return nil
	}
	key := stages.KeyOf(id, p)
	if ans, ok := n.tombstones.Answer(key, relocation.Fingerprint(p)); ok {
		n.metrics.LateFrames.Inc()
		send(ans)
		return nil
	}
	busy, dup, release := n.incoming.Admit(stages.Limits{Stages: n.cfg.MaxIncomingStages, StagesPerPeer: n.cfg.MaxIncomingStagesPerPeer, Bytes: n.cfg.MaxIncomingBytes}, key, p.GetCoordinator().GetOwnerId(), p.GetPayloadLength())
	m := relocation.NewTarget(relocation.TargetConfig{Self: n.self, SelfRoutingID: n.rid, AppVersion: n.cfg.ApplicationVersion,
		FallbackMs: n.cfg.CutoverFallback.Milliseconds(), Alloc: prefault.Alloc, MaxDeadlineMs: (n.cfg.RelocationTimeout + MaxClockSkew).Milliseconds()})
	ev.Busy, ev.Duplicate = busy, dup
	if n.tls != nil {
		ev.Peer = mtls.PeerNode(ctx) // authorize let only nodes in
	}
	if busy != "" || dup {
		// Refused before anything is staged or tracked: the machine's
		// answer goes back.
		n.metrics.StagesRefused.WithLabelValues(map[bool]string{true: "duplicate", false: "busy"}[dup]).Inc()
		relocator.Refuse(m, ev, func(f *pb.RelocationFrame) error { send(f); return nil })
		release()
		return nil
	}
	acts, err := m.Step(ev)
	mb := &targetMailbox{n: n, m: m, bulk: bulk}
	store, mailbox := n.seams.target(m, mb)
	return &stage{key: key, p: p, m: m, first: acts, err: err, store: store, mailbox: mailbox, mb: mb, release: release}
}

// status is the stage's entry in the node's relocations.
func (st *stage) status(n *Node) *pb.RelocationStatus {
	p := st.p
	return &pb.RelocationStatus{RelocationId: p.GetRelocationId(), Object: participantName(p),
		Source: fmt.Sprintf("%s@%d", p.GetCoordinator().GetOwnerId(), p.GetCoordinator().GetOwnerGeneration()),
		Target: n.self.String(), Role: "target", Phase: st.m.Phase().String(), StartedUnixMs: n.now().UnixMilli(), PayloadBytes: p.GetPayloadLength()}
}

// end is the stage's bookkeeping once its machine finished: its tombstone
// (late frames are ignored, a repeated PREPARE answered), its slot, the
// hidden instances it still held.
func (st *stage) end() {
	st.mb.n.tombstones.Remember(st.key, st.m.Fingerprint(), st.m.LastAnswer())
	st.mb.close()
	st.release()
}

func participantName(p *pb.Prepare) string {
	if len(p.GetParticipants()) == 0 {
		return ""
	}
	return p.GetParticipants()[0].GetObject()
}

// SetDraining marks the node as draining: new PREPAREs are refused with
// ShuttingDown before anything is staged, and a target in READY does not
// commit on its own without CUTOVER.
func (n *Node) SetDraining(v bool) { n.draining.Store(v); n.updateHealth() }
