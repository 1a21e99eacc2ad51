package verify

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
		switch o.Outcome {
		case OK:
			d.acked = append(d.acked, o)
		case Unknown:
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
