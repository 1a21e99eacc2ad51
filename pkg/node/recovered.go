package node

import (
	"fmt"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/node/internal/hosted"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// recreatedHere is the answer to the call that finds this node named as the
// owner of an object it does not hold in memory (h was just installed fresh
// from snap). A node writes a record naming itself only when it activates
// the object, recovers it, or commits it as a relocation target, and in each
// case it holds the instance from then on; so a record naming it without an
// instance was written by someone else for it: locationd's recovery
// controller, which re-activated an orphan here (pkg/authority Recover,
// objectGeneration+1) before anyone called it. The state of the previous
// generation died with its owner, so the call is answered as the node's own
// recovery answers it (design.md §5a, memory objects): CODE_STATE_LOST, not
// executed, with the new object generation; the next call runs on the fresh
// state. (A caller that knew the old generation would be told by execute's
// generation check anyway; this also tells a caller that did not, such as a
// one-shot meshctl call through a gateway.)
func (n *Node) recreatedHere(h *hosted.Object, snap authority.Snapshot) *pb.CallReply {
	h.LostGen = snap.Record.ObjectGeneration
	n.log.Warn().Str("object", h.Name()).Str("owner", snap.Record.Owner.String()).
		Int64("objectGeneration", snap.Record.ObjectGeneration).
		Msg("serving an object re-created on this node by the recovery controller: state of the previous generation lost")
	return stateLost(h.Reply(pb.Code_CODE_STATE_LOST, nil, fmt.Sprintf(
		"%s: re-created on %s with object generation %d after its owner died (recovery controller): the state of the previous generation is lost; the request was not executed",
		h.Name(), snap.Record.Owner, snap.Record.ObjectGeneration)))
}
