package hosted

import (
	"fmt"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Restore is the hidden instance of obj that a relocation target makes of
// its participant ps (state, de-duplication table, timers, outbox,
// captured requests, sessions): ready but served only once admitted.
func Restore(env *Env, obj keyspace.Object, typ *actor.Type, ps *pb.ParticipantState, state, relocationID []byte) (*Object, error) {
	h := New(env, obj, typ)
	var err error
	h.MarkReady()
	h.Inst = typ.New()
	if err = h.Guard("Restore", func() error { return h.Inst.Restore(state) }); err != nil {
		return nil, fmt.Errorf("restore %s: %w", obj, err)
	}
	h.NoteStateBytes(len(state)) // h is not shared yet
	if h.Replies, err = actor.DecodeReplyTable(ps.GetReplies()); err != nil {
		return nil, fmt.Errorf("de-duplication table of %s: %w", obj, err)
	}
	if len(ps.GetTimers()) > 0 {
		if h.Timers, err = actor.DecodeTimers(ps.GetTimers()); err != nil {
			return nil, fmt.Errorf("timers of %s: %w", obj, err)
		}
	}
	if h.Outbox, err = actor.DecodeOutbox(ps.GetOutbox()); err != nil {
		return nil, fmt.Errorf("outbox of %s: %w", obj, err)
	}
	if h.Outbox.Len() > 0 {
		env.outboxes.Note(h)
	}
	for _, q := range ps.GetQueued() {
		op, err := wire.ValidateCall(q)
		if err != nil {
			return nil, fmt.Errorf("%w: captured request: %v", relocation.ErrProtocol, err)
		}
		m := h.MovingLocked()
		m.Captured = append(m.Captured, &Work{Req: q, Op: op, Relay: RelayOf(q, relocationID)})
	}
	if err := h.RestoreSessions(ps.GetSessions()); err != nil {
		return nil, fmt.Errorf("%w: sessions of %s: %v", relocation.ErrProtocol, obj, err)
	}
	h.Mode = ModeHidden
	h.MovingLocked().Unhidden = make(chan struct{})
	return h, nil
}
