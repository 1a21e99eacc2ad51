package hosted

import (
	"fmt"

	"github.com/meshloc/meshloc/pkg/lifecycle"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// sinceLocked is what became of the object a caller knew at generation
// known (lifecycle.Known), judged against the record h serves under (h.Mu
// held, or on h's drain goroutine).
func (h *Object) sinceLocked(known int64) lifecycle.Since {
	var deleted int64
	if h.Rec.full != nil {
		deleted = h.Rec.full.Record.Deleted // a record with a deleted mark is never standard (served.go)
	}
	return lifecycle.Known(known, h.Fence.ObjectGeneration, deleted, h.Typ.Durable)
}

// Outdated is the refusal owed to a caller that knew generation known of
// h's object (CODE_DELETED or CODE_STATE_LOST and its message: nothing is
// executed), or CODE_OK when the call is served.
func (h *Object) Outdated(known int64) (pb.Code, string) {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	return h.OutdatedLocked(known)
}

// OutdatedLocked is Outdated with h.Mu held.
func (h *Object) OutdatedLocked(known int64) (pb.Code, string) {
	switch h.sinceLocked(known) {
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
