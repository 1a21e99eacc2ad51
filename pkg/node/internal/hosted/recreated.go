package hosted

import (
	"fmt"

	"github.com/meshloc/meshloc/pkg/authority"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Recreated is the answer to the call that found h's memory object
// re-created (h was just installed fresh from snap, a new object
// generation): its owner died with its state. The call is answered
// CODE_STATE_LOST, not executed, with the new generation, and the next call
// runs on the fresh state; a caller that knew the old generation would be
// told by the generation check anyway, this also tells one that did not
// (a one-shot call through a gateway). by says who re-created it: this
// node's recovery, or locationd's recovery controller, which writes a
// record naming this node before anyone calls it here. dead is the owner
// that died, if known.
func (h *Object) Recreated(snap authority.Snapshot, dead, by string) *pb.CallReply {
	gen, whose := snap.Record.ObjectGeneration, ""
	if dead != "" {
		whose = dead + " "
	}
	h.LostGen = gen
	h.env.log.Warn().Str("object", h.Name()).Str("deadOwner", dead).Int64("objectGeneration", gen).Str("by", by).
		Msg("re-created an object whose owner died: state lost")
	return h.Reply(pb.Code_CODE_STATE_LOST, nil, fmt.Sprintf(
		"%s: re-created on %s with object generation %d by %s after its owner %sdied: the state of the previous generation is lost; the request was not executed",
		h.Name(), snap.Record.Owner, gen, by, whose))
}
