// Package inventory is a durable object type of your own: a warehouse's
// stock, one object per warehouse (actor/inventory/<id>). Durable means
// meshloc writes the state to etcd (fenced by the object's authority
// record) before each reply leaves: an acknowledged change survives a
// crash of its node; the object comes back on another node from etcd, with
// the replies of its last calls, so a retry is still answered once.
//
// Methods (arguments are strings):
//
//	stock SKU N     add N (1..1000000) units of SKU         → the level
//	reserve SKU N   take N units, refused if fewer are left → the level
//	release SKU N   give N reserved units back              → the level
//	level SKU       read                                    → the level
//
// Snapshot is canonical (the same stock gives the same bytes), so a read
// costs no etcd write.
package inventory

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/meshloc/meshloc/pkg/actor"
)

// TypeName is the <type> of actor/inventory/<id>.
const TypeName = "inventory"

// MaxSKUs bounds the distinct SKUs of one warehouse (its state stays well
// within a node's --durable-max-bytes).
const MaxSKUs = 2000

// Type is the inventory type.
func Type() actor.Type {
	return actor.Type{
		Name:    TypeName,
		Durable: true,
		New:     func() actor.Object { return &inventory{} },
		Methods: []string{"stock", "reserve", "release", "level"},
	}
}

// Register adds the inventory type to r.
func Register(r *actor.Registry) error { return r.Register(Type()) }

// Level is what every method answers.
type Level struct {
	SKU       string `json:"sku"`
	Available int64  `json:"available"`
	Reserved  int64  `json:"reserved"`
}

type stock struct {
	Available map[string]int64 `json:"available,omitempty"`
	Reserved  map[string]int64 `json:"reserved,omitempty"`
}

type inventory struct{ s stock }

// Handle implements actor.Object.
func (inv *inventory) Handle(_ actor.Context, method string, args [][]byte) ([]byte, error) {
	if method == "level" {
		if len(args) != 1 {
			return nil, actor.InvalidArgument("level takes SKU")
		}
		return inv.level(string(args[0]))
	}
	if len(args) != 2 {
		return nil, actor.InvalidArgument("%s takes SKU N, got %d argument(s)", method, len(args))
	}
	sku := string(args[0])
	n, err := strconv.ParseInt(string(args[1]), 10, 64)
	if sku == "" || len(sku) > 64 || err != nil || n < 1 || n > 1_000_000 {
		return nil, actor.InvalidArgument("%s %q %q: want a SKU of 1..64 bytes and N 1..1000000", method, args[0], args[1])
	}
	// Each map on its own: a state restored from etcd has no empty map
	// (omitempty), e.g. stock never reserved.
	if inv.s.Available == nil {
		inv.s.Available = map[string]int64{}
	}
	if inv.s.Reserved == nil {
		inv.s.Reserved = map[string]int64{}
	}
	switch method {
	case "stock":
		if _, ok := inv.s.Available[sku]; !ok && len(inv.s.Available) >= MaxSKUs {
			return nil, actor.Rejected("the warehouse holds %d SKUs already", MaxSKUs)
		}
		inv.s.Available[sku] += n
	case "reserve":
		if inv.s.Available[sku] < n {
			return nil, actor.Rejected("%s: %d available, %d asked", sku, inv.s.Available[sku], n)
		}
		inv.s.Available[sku] -= n
		inv.s.Reserved[sku] += n
	case "release":
		if inv.s.Reserved[sku] < n {
			return nil, actor.Rejected("%s: %d reserved, %d released", sku, inv.s.Reserved[sku], n)
		}
		inv.s.Reserved[sku] -= n
		inv.s.Available[sku] += n
	default:
		return nil, actor.UnknownMethod(TypeName, method)
	}
	return inv.level(sku)
}

func (inv *inventory) level(sku string) ([]byte, error) {
	return json.Marshal(Level{SKU: sku, Available: inv.s.Available[sku], Reserved: inv.s.Reserved[sku]})
}

// Snapshot implements actor.Object: canonical JSON (sorted keys).
func (inv *inventory) Snapshot() ([]byte, error) { return json.Marshal(inv.s) }

// Restore implements actor.Object.
func (inv *inventory) Restore(b []byte) error {
	var s stock
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%w: inventory: %v", actor.ErrCorruptState, err)
	}
	inv.s = s
	return nil
}
