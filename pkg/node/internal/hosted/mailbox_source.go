package hosted

import (
	"context"
	"sync"
	"time"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/session"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// SourceMailbox is what one source relocation moves, as this node hosts
// it (the relocator's SourceMailbox): one actor, or a group's members in
// participant order (a group record has no instance of its own).
type SourceMailbox struct {
	Env       *Env
	ID        wire.RelocationID
	Primary   keyspace.Object
	Target    string // the owner id the requests are handed to
	TargetGen int64
	Group     bool // Primary is a group: Units are its members
	Units     []*Object
	counts    []int // DATA requests handed over per unit, in order
}

// Seal stops dispatch to every unit first, then waits for the handlers in
// progress, then captures each: a group is sealed as one (its members'
// handlers never run across the seal). A failure anywhere is rolled back
// for all of them by the machine's Preserve → Reopen.
func (m *SourceMailbox) Seal(ctx context.Context, a relocation.Seal) ([][]byte, error) {
	m.sealSessions(ctx)
	waits := make([]chan struct{}, len(m.Units))
	for i, h := range m.Units {
		waits[i] = h.SealStart()
	}
	for _, w := range waits {
		if err := WaitSealed(ctx, w); err != nil {
			return nil, err
		}
	}
	return m.envelope(a.Participants, a.Align, a.Start, 0, func(h *Object) (*pb.ParticipantState, []byte, error) { return h.Capture(m.Target) })
}

// Snapshot captures every unit's state while it serves, one after the
// other (a pre-copy's base need not be one moment: only the sealed
// payload is restored), in the envelope Seal makes.
func (m *SourceMailbox) Snapshot(ctx context.Context, a relocation.Snapshot) ([][]byte, error) {
	return m.envelope(a.Participants, a.Align, 0, a.Room, func(h *Object) (*pb.ParticipantState, []byte, error) { return h.SnapshotLive(ctx) })
}

// envelope is the payload of the units as take gives them (a group's
// record first, without state), the states aligned to align bytes from
// start on, room bytes after the envelope (EncodeEnvelopeAligned).
func (m *SourceMailbox) envelope(parts []record.Snapshot, align, start, room int, take func(*Object) (*pb.ParticipantState, []byte, error)) ([][]byte, error) {
	var pss []*pb.ParticipantState
	var states [][]byte
	if m.Group {
		g := parts[0]
		pss = append(pss, &pb.ParticipantState{Participant: &pb.Participant{Object: g.Object.String(), ObjectGeneration: g.Record.ObjectGeneration,
			AuthorityGeneration: g.Record.AuthorityGeneration, StoreVersion: g.StoreVersion}})
		states = append(states, nil)
	}
	for _, h := range m.Units {
		ps, st, err := take(h)
		if err != nil {
			return nil, err
		}
		pss = append(pss, ps)
		states = append(states, st)
	}
	return relocation.EncodeEnvelopeAligned(m.ID, pss, states, align, start, room)
}

// StateBytes is the units' state size as last seen (-1: one is unknown).
func (m *SourceMailbox) StateBytes() int {
	total := 0
	for _, h := range m.Units {
		n := h.KnownStateBytes()
		if n < 0 {
			return -1
		}
		total += n
	}
	return total
}

// Boundary holds every unit's new requests and hands over those kept since
// the seal, unit by unit.
func (m *SourceMailbox) Boundary() []*pb.CallRequest {
	m.counts = m.counts[:0]
	var out []*pb.CallRequest
	for _, h := range m.Units {
		ws := h.Hold()
		m.counts = append(m.counts, len(ws))
		for _, w := range ws {
			out = append(out, m.Env.handOver(w, m.Target))
		}
	}
	return out
}

func (m *SourceMailbox) Reopen(a relocation.Reopen) {
	if !m.Group {
		m.Units[0].Reopen(a.Record)
	} else {
		m.Env.cache.Observe(a.Record)
		for _, h := range m.Units {
			h.Reopen(a.Members[h.Name()])
		}
	}
	for _, h := range m.Units {
		h.RouteSessions(m.ID[:], false) // the sessions are bound here again
	}
}

// Drop: the DATA requests went unit by unit (Boundary), so the first
// DataApplied of them are each unit's first ones.
func (m *SourceMailbox) Drop(a relocation.Drop) {
	if !m.Group {
		m.Units[0].Drop(a.Committed, a.DataApplied)
		return
	}
	m.Env.cache.ObserveLocation(m.Primary, a.Committed)
	left := a.DataApplied
	for i, h := range m.Units {
		applied := 0
		if i < len(m.counts) {
			applied = min(left, m.counts[i])
			left -= applied
		}
		h.Drop(a.Members[h.Name()], applied)
	}
}

func (m *SourceMailbox) Fail(code pb.Code, msg string) {
	for _, h := range m.Units {
		h.FailAll(code, msg)
	}
}

// sessionSealWait bounds the wait for the gateways' answers to a seal.
const sessionSealWait = 2 * time.Second

// sealSessions seals every session bound to the units before the seal of
// the mailbox: no delivery from now on, and each gateway told, answers
// awaited at most sessionSealWait.
func (m *SourceMailbox) sealSessions(ctx context.Context) {
	n := m.Env
	type seal struct {
		h   *Object
		ref session.Ref
	}
	var seals []seal
	for _, h := range m.Units {
		h.Mu.Lock()
		for _, b := range h.Sessions {
			b.Sealed = true
			seals = append(seals, seal{h, b.J.Gateway})
		}
		h.Mu.Unlock()
	}
	if len(seals) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, sessionSealWait)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range seals {
		fence := n.wireFence(s.h.Fence, s.h.Version, n.rid.Hex())
		wg.Go(func() {
			req := &pb.SessionSealRequest{RelocationId: m.ID[:], Object: s.h.Name(), Fence: fence, Session: s.ref.Proto(),
				TargetId: m.Target, TargetGeneration: m.TargetGen}
			code := n.node.SessionSeal(ctx, s.ref, req)
			n.metrics.SessionsSealed.WithLabelValues(wire.CodeName(code)).Inc()
		})
	}
	wg.Wait()
}
