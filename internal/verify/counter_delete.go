package verify

import (
	"encoding/json"
	"slices"

	"github.com/meshloc/meshloc/internal/verify/remindcheck"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// counterDeletes are the deletes of one counter in a history: the
// acknowledged ones (their reply's fence names the generation deleted) and
// those of unknown outcome.
type counterDeletes struct {
	acked, unknown []Op
}

func deletesOf(ops []Op) counterDeletes {
	var d counterDeletes
	for _, o := range ops {
		if o.Kind != "delete" {
			continue
		}
		switch {
		case o.Outcome == OK:
			d.acked = append(d.acked, o)
		case o.Outcome == Unknown || o.Code == pb.Code_CODE_DELETED:
			// A delete answered deleted may have been its own retry
			// (the first attempt's reply lost): it may have deleted.
			d.unknown = append(d.unknown, o)
		}
	}
	return d
}

// epoch is the largest generation deleted, by an acknowledged delete,
// before generation g: only adds of later generations count in a value
// read under g. sameOnly: a delete of unknown outcome was called before
// ret, so any generation change may have been a delete too; the lower
// bound then counts only adds of generation g itself (the same object
// incarnation for certain).
func (d counterDeletes) epoch(g int64, ret int64) (epoch int64, sameOnly bool) {
	for _, o := range d.acked {
		if dg := o.Fence.ObjectGeneration; dg < g && dg > epoch {
			epoch = dg
		}
	}
	for _, o := range d.unknown {
		if o.Call < ret {
			sameOnly = true
		}
	}
	return epoch, sameOnly
}

// cameBack reports whether s, a reply, came from a deleted object: called
// after an acknowledged delete returned, under a generation no later than
// the one that delete removed (the deleted state answered again).
func (d counterDeletes) cameBack(s Op) (Op, bool) {
	for _, o := range d.acked {
		if s.Call > o.Return && s.Fence.ObjectGeneration <= o.Fence.ObjectGeneration && s.ID != o.ID {
			return o, true
		}
	}
	return Op{}, false
}

// expectReminders expects each acknowledged one-shot remind of ops to have
// run once, unless a delete of its object may have come before it ran or
// it was due less than 3 s before the final reads began.
func expectReminders(rc *remindcheck.Result, h *History, ops []Op) {
	finals := int64(Infinity)
	for _, o := range ops {
		if o.Final {
			finals = min(finals, o.Call)
		}
	}
	cutoff := h.Start().UnixMilli() + finals/1e6 - 3000
	for _, o := range ops {
		var r struct{ DueMs int64 }
		if o.Kind != "remind" || o.Outcome != OK || len(o.Input) != 3 || o.Input[2] != "0" || json.Unmarshal(o.Output, &r) != nil || r.DueMs > cutoff {
			continue
		}
		if !slices.ContainsFunc(ops, func(d Op) bool { return d.Object == o.Object && d.Kind == "delete" && d.Return >= o.Call }) {
			rc.Expect(o.Object, o.Input[0], r.DueMs)
		}
	}
}
