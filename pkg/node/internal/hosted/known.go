package hosted

import (
	"fmt"
	"time"

	"github.com/meshloc/meshloc/pkg/lifecycle"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// deletedLocked is the deleted mark of the record h serves under: the
// generation last deleted under its name and when (0, 0: none).
func (h *Object) deletedLocked() (gen, atMs int64) {
	if h.Rec.full == nil {
		return 0, 0 // a record with a deleted mark is never standard (served.go)
	}
	return h.Rec.full.Record.Deleted, h.Rec.full.Record.DeletedAtMs
}

// Outdated is the refusal owed to a call of operation op (zero: none, a
// session's bind) by a caller that knew generation known of h's object
// (CODE_DELETED or CODE_STATE_LOST and its message: nothing is executed),
// or CODE_OK when the call is served. An operation made before the name's
// last delete is refused too (lifecycle.MadeBefore): a retry of a request
// the deleted object may have run, by a caller that never learnt its
// generation.
func (h *Object) Outdated(known int64, op wire.OperationID) (pb.Code, string) {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	return h.OutdatedLocked(known, op)
}

// OutdatedLocked is Outdated with h.Mu held.
func (h *Object) OutdatedLocked(known int64, op wire.OperationID) (pb.Code, string) {
	deleted, at := h.deletedLocked()
	if !op.IsZero() && lifecycle.MadeBefore(op.Time().UnixMilli(), at) {
		return pb.Code_CODE_DELETED, fmt.Sprintf(
			"operation %s was made before %s of object generation %d was deleted (%s); it is not run on the new object of generation %d",
			op, h.name, deleted, time.UnixMilli(at).UTC().Format(time.RFC3339Nano), h.Fence.ObjectGeneration)
	}
	switch lifecycle.Known(known, h.Fence.ObjectGeneration, deleted, h.Typ.Durable) {
	case lifecycle.Deleted:
		return pb.Code_CODE_DELETED, fmt.Sprintf(
			"%s of object generation %d was deleted; this is a new object of generation %d: the request was not executed",
			h.name, known, h.Fence.ObjectGeneration)
	case lifecycle.StateLost:
		return pb.Code_CODE_STATE_LOST, fmt.Sprintf(
			"%s was re-created (object generation %d → %d): its state died with its owner; the request was not executed",
			h.name, known, h.Fence.ObjectGeneration)
	}
	return pb.Code_CODE_OK, ""
}
