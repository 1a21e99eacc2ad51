package node

import (
	"context"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// sourceMailbox is what one source relocation moves, as this node hosts
// it (the relocator's SourceMailbox): one actor, or a group's members in
// participant order (a group record has no instance of its own).
type sourceMailbox struct {
	n         *Node
	id        wire.RelocationID
	primary   keyspace.Object
	target    string // the owner id the requests are handed to
	targetGen int64
	group     bool // primary is a group: units are its members
	units     []*hosted
	counts    []int // DATA requests handed over per unit, in order
}

// Seal stops dispatch to every unit first, then waits for the handlers in
// progress, then captures each: a group is sealed as one (its members'
// handlers never run across the seal). A failure anywhere is rolled back
// for all of them by the machine's Preserve → Reopen.
func (m *sourceMailbox) Seal(ctx context.Context, a relocation.Seal) ([][]byte, error) {
	m.sealSessions(ctx) // session_move.go
	waits := make([]chan struct{}, len(m.units))
	for i, h := range m.units {
		waits[i] = h.sealStart()
	}
	for _, w := range waits {
		if err := waitSealed(ctx, w); err != nil {
			return nil, err
		}
	}
	return m.envelope(a.Participants, a.Align, a.Start, 0, func(h *hosted) (*pb.ParticipantState, []byte, error) { return h.capture(m.target) })
}

// Snapshot captures every unit's state while it serves, one after the
// other (a pre-copy's base need not be one moment: only the sealed
// payload is restored), in the envelope Seal makes.
func (m *sourceMailbox) Snapshot(ctx context.Context, a relocation.Snapshot) ([][]byte, error) {
	return m.envelope(a.Participants, a.Align, 0, a.Room, func(h *hosted) (*pb.ParticipantState, []byte, error) { return h.snapshotLive(ctx) })
}

// envelope is the payload of the units as take gives them (a group's
// record first, without state), the states aligned to align bytes from
// start on, room bytes after the envelope (EncodeEnvelopeAligned).
func (m *sourceMailbox) envelope(parts []record.Snapshot, align, start, room int, take func(*hosted) (*pb.ParticipantState, []byte, error)) ([][]byte, error) {
	var pss []*pb.ParticipantState
	var states [][]byte
	if m.group {
		g := parts[0]
		pss = append(pss, &pb.ParticipantState{Participant: &pb.Participant{Object: g.Object.String(), ObjectGeneration: g.Record.ObjectGeneration,
			AuthorityGeneration: g.Record.AuthorityGeneration, StoreVersion: g.StoreVersion}})
		states = append(states, nil)
	}
	for _, h := range m.units {
		ps, st, err := take(h)
		if err != nil {
			return nil, err
		}
		pss = append(pss, ps)
		states = append(states, st)
	}
	return relocation.EncodeEnvelopeAligned(m.id, pss, states, align, start, room)
}

// stateBytes is the units' state size as last seen (-1: one is unknown).
func (m *sourceMailbox) stateBytes() int {
	total := 0
	for _, h := range m.units {
		n := h.knownStateBytes()
		if n < 0 {
			return -1
		}
		total += n
	}
	return total
}

// Boundary holds every unit's new requests and hands over those kept since
// the seal, unit by unit.
func (m *sourceMailbox) Boundary() []*pb.CallRequest {
	m.counts = m.counts[:0]
	var out []*pb.CallRequest
	for _, h := range m.units {
		ws := h.hold()
		m.counts = append(m.counts, len(ws))
		for _, w := range ws {
			out = append(out, m.n.handOver(w, m.target))
		}
	}
	return out
}

func (m *sourceMailbox) Reopen(a relocation.Reopen) {
	if !m.group {
		m.units[0].reopen(a.Record)
	} else {
		m.n.cache.Observe(a.Record)
		for _, h := range m.units {
			h.reopen(a.Members[h.name])
		}
	}
	for _, h := range m.units {
		h.routeSessions(m.id[:], false) // the sessions are bound here again
	}
}

// Drop: the DATA requests went unit by unit (Boundary), so the first
// DataApplied of them are each unit's first ones.
func (m *sourceMailbox) Drop(a relocation.Drop) {
	if !m.group {
		m.units[0].drop(a.Committed, a.DataApplied)
		return
	}
	m.n.cache.ObserveLocation(m.primary, a.Committed)
	left := a.DataApplied
	for i, h := range m.units {
		applied := 0
		if i < len(m.counts) {
			applied = min(left, m.counts[i])
			left -= applied
		}
		h.drop(a.Members[h.name], applied)
	}
}

func (m *sourceMailbox) Fail(code pb.Code, msg string) {
	for _, h := range m.units {
		h.failAll(code, msg)
	}
}
