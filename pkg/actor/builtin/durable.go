package builtin

import (
	"strings"

	"github.com/meshloc/meshloc/pkg/actor"
)

// DurablePrefix names the durable variant of a built-in type: "d" + its name.
//
// Every built-in type exists twice: as a memory type (counter, list, …: its
// state lives in its owner's memory and dies with it, declared with
// CODE_STATE_LOST) and as a durable type (dcounter, dlist, …: the same
// logic, replies and snapshots, with actor.Type.Durable set, so every
// acknowledged change is persisted in etcd before the reply and survives a
// crash of its owner). Both are registered by Register, so one cluster runs
// memory and durable objects side by side, and the name of an object says
// which it is: actor/dbank/b1 is durable wherever it lives, on every node,
// whatever the node's flags. (A per-node switch that made "bank" durable
// would let two nodes disagree about the same object: one would recover it
// from etcd, the other would re-create it empty.)
const DurablePrefix = "d"

// Type names of the durable variants.
const (
	DurableCounterType  = DurablePrefix + CounterType
	DurableRegisterType = DurablePrefix + RegisterType
	DurableListType     = DurablePrefix + ListType
	DurableBankType     = DurablePrefix + BankType
	DurableBlobType     = DurablePrefix + BlobType
	DurableTickerType   = DurablePrefix + TickerType
)

// DurableTypes returns the durable variant of every built-in type.
func DurableTypes() []actor.Type {
	ts := Types()
	out := make([]actor.Type, 0, len(ts))
	for _, t := range ts {
		t.Name = DurablePrefix + t.Name
		t.Durable = true
		out = append(out, t)
	}
	return out
}

// IsDurable reports whether name is the durable variant of a built-in type.
func IsDurable(name string) bool {
	base, ok := strings.CutPrefix(name, DurablePrefix)
	if !ok {
		return false
	}
	for _, t := range Types() {
		if t.Name == base {
			return true
		}
	}
	return false
}
