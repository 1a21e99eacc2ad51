package session

import (
	"fmt"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Bounds of a journal: what one slow client can make its object keep.
const (
	// MaxPending is the most pushes a session keeps unacknowledged.
	MaxPending = 4096
	// MaxPendingBytes bounds their payloads together.
	MaxPendingBytes = 4 << 20
	// MaxPushBytes bounds one push's payload.
	MaxPushBytes = 256 << 10
)

// Errors of journals.
var (
	// ErrBacklog: the client acknowledges too slowly; the push is refused
	// (the object's handler decides: Publish skips such a session).
	ErrBacklog = wire.Sentinel(pb.Code_CODE_RESOURCE_EXHAUSTED, "session: the client's unacknowledged pushes are at their bound")
	// ErrInvalid: a journal or a session field from the network is malformed.
	ErrInvalid = wire.Sentinel(pb.Code_CODE_PROTOCOL_ERROR, "session: invalid")
	// ErrStale: a message names another binding or gateway than the
	// session's now.
	ErrStale = wire.Sentinel(pb.Code_CODE_STALE_FENCE, "session: stale")
)

// Journal is the object's side of one session, kept by the object's owner
// with the object (and moved with it): the pushes the client has not
// acknowledged, and the last call executed. It is plain data; the owner
// serializes access (the object's mailbox).
type Journal struct {
	Gateway   Ref
	NextPush  uint64 // the seq the next push gets (from 1)
	Pending   []Push // unacknowledged, in seq order
	AckedPush uint64
	LastCall  uint64
	bytes     int
}

// NewJournal is the journal of a session bound for the first time.
func NewJournal(gw Ref) *Journal {
	gw.Binding = 1
	return &Journal{Gateway: gw, NextPush: 1}
}

// Push appends a push, made in the turn whose traceparent is trace ("":
// not traced); ErrBacklog when the bounds are reached.
func (j *Journal) Push(payload []byte, trace string) (Push, error) {
	if len(payload) > MaxPushBytes {
		return Push{}, fmt.Errorf("%w: a push of %d bytes (at most %d)", ErrInvalid, len(payload), MaxPushBytes)
	}
	if len(j.Pending) >= MaxPending || j.bytes+len(payload) > MaxPendingBytes {
		return Push{}, ErrBacklog
	}
	p := Push{Seq: j.NextPush, Payload: payload, Trace: trace}
	j.NextPush++
	j.Pending = append(j.Pending, p)
	j.bytes += len(payload)
	return p, nil
}

// Ack drops the pushes up to seq (the client has them). A seq beyond the
// last push is ErrInvalid and changes nothing.
func (j *Journal) Ack(seq uint64) error {
	if seq >= j.NextPush {
		return fmt.Errorf("%w: ack of push %d, the last is %d", ErrInvalid, seq, j.NextPush-1)
	}
	if seq <= j.AckedPush {
		return nil
	}
	j.AckedPush = seq
	k := 0
	for k < len(j.Pending) && j.Pending[k].Seq <= seq {
		j.bytes -= len(j.Pending[k].Payload)
		k++
	}
	j.Pending = j.Pending[k:]
	return nil
}

// Bind binds the session to gw again (a resume, or a gateway taking over):
// a new binding; what the client received is acknowledged. It returns the
// binding.
func (j *Journal) Bind(gw Ref, received uint64) (uint64, error) {
	if err := j.Ack(min(received, j.NextPush-1)); err != nil {
		return 0, err
	}
	gw.Binding = j.Gateway.Binding + 1
	j.Gateway = gw
	return gw.Binding, nil
}

// Rebind is a new binding for the same gateway (the object moved).
func (j *Journal) Rebind() uint64 {
	j.Gateway.Binding++
	return j.Gateway.Binding
}

// After is the pending pushes after seq, in order.
func (j *Journal) After(seq uint64) []Push {
	for i, p := range j.Pending {
		if p.Seq > seq {
			return j.Pending[i:]
		}
	}
	return nil
}

// Call checks a call's seq against the journal before it runs: a later one
// than the last executed runs (Executed then records it); an earlier one,
// or the same, is a retry, answered from the de-duplication table (retry
// true). A gap is no error: the gateway forwards one call at a time and the
// next only after an answer, so the calls between were answered without
// running (refused before they reached the object: an unknown method, an
// expired operation id), and their retries are refused the same way.
func (j *Journal) Call(seq uint64) (retry bool, err error) {
	switch {
	case seq == 0:
		return false, fmt.Errorf("%w: call seq 0", ErrInvalid)
	case seq <= j.LastCall:
		return true, nil
	}
	return false, nil
}

// Executed records that call seq ran.
func (j *Journal) Executed(seq uint64) { j.LastCall = max(j.LastCall, seq) }

// Proto is the journal's wire form.
func (j *Journal) Proto() *pb.SessionJournal {
	out := &pb.SessionJournal{Gateway: j.Gateway.Proto(), NextPush: j.NextPush, AckedPush: j.AckedPush, LastCall: j.LastCall}
	for _, p := range j.Pending {
		out.Pending = append(out.Pending, p.Proto())
	}
	return out
}

// JournalOf decodes a journal from the network (a relocation's payload),
// checking every field and bound: ErrInvalid otherwise.
func JournalOf(m *pb.SessionJournal) (*Journal, error) {
	gw, err := RefOf(m.GetGateway())
	if err != nil {
		return nil, err
	}
	j := &Journal{Gateway: gw, NextPush: m.GetNextPush(), AckedPush: m.GetAckedPush(), LastCall: m.GetLastCall()}
	if j.NextPush == 0 || j.AckedPush >= j.NextPush || len(m.GetPending()) > MaxPending {
		return nil, fmt.Errorf("%w: journal next %d acked %d with %d pending", ErrInvalid, j.NextPush, j.AckedPush, len(m.GetPending()))
	}
	prev := j.AckedPush
	for _, p := range m.GetPending() {
		if p.GetSeq() != prev+1 || p.GetSeq() >= j.NextPush || len(p.GetPayload()) > MaxPushBytes {
			return nil, fmt.Errorf("%w: journal push %d after %d (next %d)", ErrInvalid, p.GetSeq(), prev, j.NextPush)
		}
		prev = p.GetSeq()
		j.Pending = append(j.Pending, PushOf(p))
		j.bytes += len(p.GetPayload())
	}
	if j.bytes > MaxPendingBytes || (len(j.Pending) > 0 && prev != j.NextPush-1) || (len(j.Pending) == 0 && j.AckedPush != j.NextPush-1) {
		return nil, fmt.Errorf("%w: journal pending pushes do not reach its next seq %d", ErrInvalid, j.NextPush)
	}
	return j, nil
}
