package node

import (
	"fmt"
	"sync"

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
	if err := n.admitIncoming(stream); err != nil {
		return err // a background relocation this node's pacing did not admit: nothing was received
	}
	peer := n.seams.targetPeer(&serverPeer{s: stream})
	first, err := peer.Recv()
	if err != nil {
		return err
	}
	p := first.GetPrepare()
	if p == nil {
		n.metrics.lateFrames.Inc()
		return errProtocol("the first frame of a relocation stream must be PREPARE")
	}
	id, err := wire.ParseRelocationIDBytes(p.GetRelocationId())
	if err != nil {
		return errProtocol(err.Error())
	}
	if ans, ok := n.tombstones.answer(id, relocation.Fingerprint(p)); ok {
		n.metrics.lateFrames.Inc()
		return peer.Send(ans)
	}
	busy, dup, release := n.incoming.admit(&n.cfg, id, p.GetCoordinator().GetOwnerId(), p.GetPayloadLength())
	defer release()
	m := relocation.NewTarget(relocation.TargetConfig{Self: n.self, SelfRoutingID: n.rid, AppVersion: n.cfg.ApplicationVersion,
		FallbackMs: n.cfg.CutoverFallback.Milliseconds(), Alloc: allocPayload, MaxDeadlineMs: (n.cfg.RelocationTimeout + MaxClockSkew).Milliseconds()})
	ev := relocation.PrepareEvent{Prepare: p, NowMs: n.now().UnixMilli(), Draining: n.draining.Load(), Busy: busy, Duplicate: dup}
	if n.tls != nil {
		ev.Peer = peerNode(stream.Context()) // authorize let only nodes in
	}
	if busy != "" || dup {
		// Refused before anything is staged or tracked: the machine's
		// answer goes back and the stream ends.
		n.metrics.stagesRefused.WithLabelValues(map[bool]string{true: "duplicate", false: "busy"}[dup]).Inc()
		relocator.Refuse(m, ev, peer.Send)
		return nil
	}
	rec := n.relocs.track(&pb.RelocationStatus{RelocationId: id[:], Object: participantName(p), Source: fmt.Sprintf("%s@%d", p.GetCoordinator().GetOwnerId(), p.GetCoordinator().GetOwnerGeneration()),
		Target: n.self.String(), Role: "target", Phase: m.Phase().String(), StartedUnixMs: n.now().UnixMilli(), PayloadBytes: p.GetPayloadLength()})
	defer n.relocs.untrack(rec)
	rep := &reporter{n: n, rec: rec, role: "target", sealedUs: m.SealedUnixUs}
	acts, err := m.Step(ev)
	if err != nil {
		rep.Failed(err)
	}
	mb := &targetMailbox{n: n, m: m}
	defer mb.close()
	store, mailbox := n.seams.target(m, mb)
	t := &relocator.Target{
		Machine: m, Self: n.self, Node: n.selfNode,
		Store: store, Peer: peer, Mailbox: mailbox,
		Report: rep, Clock: n.clock, Draining: n.draining.Load, Stop: n.stopping,
	}
	t.Run(n.life, acts)
	n.tombstones.remember(m.ID(), m.Fingerprint(), m.LastAnswer())
	return nil
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

// tombstones remember finished target stages (bounded), so a late or repeated
// PREPARE gets the same answer and late frames are ignored, never re-applied.
type tombstones struct {
	mu    sync.Mutex
	by    map[wire.RelocationID]tombstone
	order []wire.RelocationID
	max   int
}

type tombstone struct {
	fp     [32]byte
	answer *pb.RelocationFrame
}

func newTombstones(max int) *tombstones {
	return &tombstones{by: map[wire.RelocationID]tombstone{}, max: max}
}

func (t *tombstones) remember(id wire.RelocationID, fp [32]byte, ans *pb.RelocationFrame) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.by[id]; !ok {
		t.order = append(t.order, id)
	}
	t.by[id] = tombstone{fp: fp, answer: ans}
	for len(t.order) > t.max {
		delete(t.by, t.order[0])
		t.order = t.order[1:]
	}
}

func (t *tombstones) answer(id wire.RelocationID, fp [32]byte) (*pb.RelocationFrame, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts, ok := t.by[id]
	if !ok {
		return nil, false
	}
	if ts.fp != fp {
		return &pb.RelocationFrame{Frame: &pb.RelocationFrame_Failed{Failed: &pb.Failed{RelocationId: id[:], Code: pb.Code_CODE_PROTOCOL_ERROR, Message: "PREPARE repeated with other bytes"}}}, true
	}
	if ts.answer == nil {
		return &pb.RelocationFrame{Frame: &pb.RelocationFrame_Failed{Failed: &pb.Failed{RelocationId: id[:], Code: pb.Code_CODE_ALREADY_TERMINAL, Message: "relocation already ended"}}}, true
	}
	return ts.answer, true
}
