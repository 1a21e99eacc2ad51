// Package cart is a shopping cart hosted by meshloc: an example of an
// object type of your own. Each cart is one object, actor/cart/<id>, living
// in the memory of one node at a time; meshloc routes every call to it,
// moves it between nodes with its state, timers and queued calls, and
// executes each call exactly once.
//
// The contract an object type keeps (pkg/actor):
//
//   - Handle runs one call at a time (never concurrently for one cart), and
//     deterministically: its reply depends on the state and the call only,
//     so a retried call (same operation id) is answered from meshloc's
//     de-duplication table, never run twice.
//   - Snapshot and Restore carry the whole state: meshloc calls them when
//     the cart moves to another node.
//   - Timers (ctx.SetTimer) travel with the cart: an idle cart expires on
//     whichever node holds it when its time comes.
//   - Messages (ctx.Ask) to other objects are part of the call's effect:
//     reserve asks a warehouse (the inventory example, another module on
//     other nodes) to reserve each item; meshloc delivers each message
//     exactly once, also while the cart or the warehouse moves, and brings
//     each answer back to OnReply, once.
//
// Methods (arguments are strings):
//
//	add ITEM QTY        add QTY (1..1000) of ITEM           → the cart
//	remove ITEM QTY     remove up to QTY of ITEM            → the cart
//	items               read                                → the cart
//	checkout            empty it, answer what was in it     → the cart before
//	reserve WAREHOUSE   ask actor/inventory/<id> to reserve → the cart
//	                    every item (Reservations: pending, then reserved
//	                    or refused, as the answers come)
//
// A cart untouched for TTL (Type's argument) is emptied by its timer.
package cart

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
)

// TypeName is the <type> of actor/cart/<id>.
const TypeName = "cart"

// expireTimer is the name of the idle timer.
const expireTimer = "expire"

// MaxItems bounds the distinct items of one cart.
const MaxItems = 1000

// Type is the cart type, expiring carts left idle for ttl.
func Type(ttl time.Duration) actor.Type {
	return actor.Type{
		Name:    TypeName,
		New:     func() actor.Object { return &cart{ttl: ttl} },
		Methods: []string{"add", "remove", "items", "checkout", "reserve"},
	}
}

// Register adds the cart type to r.
func Register(r *actor.Registry, ttl time.Duration) error { return r.Register(Type(ttl)) }

// View is what every method answers: the cart's items and their quantities,
// and when it was last changed (Unix ms).
type View struct {
	Items     map[string]int `json:"items"`
	TouchedMs int64          `json:"touchedMs"`
	Expired   int            `json:"expired"` // carts emptied by the timer so far
	// Reservations of reserve, by item: "pending" until the warehouse
	// answers, then "reserved" or "refused: <why>".
	Reservations map[string]string `json:"reservations,omitempty"`
}

// Reservation states.
const (
	Pending  = "pending"
	Reserved = "reserved"
)

type cart struct {
	ttl time.Duration
	s   View
}

// Handle implements actor.Object.
func (c *cart) Handle(ctx actor.Context, method string, args [][]byte) ([]byte, error) {
	switch method {
	case "add", "remove":
		if len(args) != 2 {
			return nil, actor.InvalidArgument("%s takes ITEM QTY, got %d argument(s)", method, len(args))
		}
		item := string(args[0])
		qty, err := strconv.Atoi(string(args[1]))
		if item == "" || len(item) > 128 || err != nil || qty < 1 || qty > 1000 {
			return nil, actor.InvalidArgument("%s %q %q: want an item of 1..128 bytes and a quantity 1..1000", method, args[0], args[1])
		}
		if c.s.Items == nil {
			c.s.Items = map[string]int{}
		}
		if method == "add" {
			if _, ok := c.s.Items[item]; !ok && len(c.s.Items) >= MaxItems {
				return nil, actor.Rejected("the cart holds %d items already", MaxItems)
			}
			c.s.Items[item] += qty
		} else if n := c.s.Items[item] - qty; n > 0 {
			c.s.Items[item] = n
		} else {
			delete(c.s.Items, item)
		}
		return c.touch(ctx)
	case "items":
		if len(args) != 0 {
			return nil, actor.InvalidArgument("items takes no argument")
		}
		return json.Marshal(c.s)
	case "reserve":
		return c.reserve(ctx, args)
	case "checkout":
		before, err := json.Marshal(c.s)
		if err != nil {
			return nil, err
		}
		c.s.Items = nil
		ctx.CancelTimer(expireTimer)
		return before, nil
	}
	return nil, actor.UnknownMethod(TypeName, method)
}

// touch records a change and (re)starts the idle timer.
func (c *cart) touch(ctx actor.Context) ([]byte, error) {
	c.s.TouchedMs = ctx.Now().UnixMilli()
	if err := ctx.SetTimer(actor.TimerSpec{Name: expireTimer, Period: c.ttl, Policy: actor.Skip}); err != nil {
		return nil, fmt.Errorf("cart: idle timer: %w", err)
	}
	return json.Marshal(c.s)
}

// OnTimer implements actor.TimerObject: an idle cart is emptied.
func (c *cart) OnTimer(ctx actor.Context, tick actor.Tick) error {
	if tick.Name != expireTimer || ctx.Now().Sub(time.UnixMilli(c.s.TouchedMs)) < c.ttl {
		return nil
	}
	if len(c.s.Items) > 0 {
		c.s.Expired++
	}
	c.s.Items = nil
	ctx.CancelTimer(expireTimer)
	return nil
}

// Snapshot implements actor.Object: the whole state, canonical JSON.
func (c *cart) Snapshot() ([]byte, error) { return json.Marshal(c.s) }

// Restore implements actor.Object.
func (c *cart) Restore(b []byte) error {
	var s View
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%w: cart: %v", actor.ErrCorruptState, err)
	}
	if len(s.Items) > MaxItems {
		return fmt.Errorf("%w: cart: %d items", actor.ErrCorruptState, len(s.Items))
	}
	c.s = s
	return nil
}

// reserve asks the warehouse to reserve each item: one message per item,
// sent with the cart's change (the pending reservations) or not at all.
func (c *cart) reserve(ctx actor.Context, args [][]byte) ([]byte, error) {
	if len(args) != 1 || !strings.HasPrefix(string(args[0]), "actor/inventory/") {
		return nil, actor.InvalidArgument("reserve takes WAREHOUSE (actor/inventory/<id>)")
	}
	if len(c.s.Items) == 0 {
		return nil, actor.Rejected("the cart is empty")
	}
	warehouse := string(args[0])
	for _, item := range slices.Sorted(maps.Keys(c.s.Items)) { // the same order on every run
		if c.s.Reservations[item] == Pending || c.s.Reservations[item] == Reserved {
			continue
		}
		if err := ctx.Ask(warehouse, "reserve", []byte(item), []byte(strconv.Itoa(c.s.Items[item]))); err != nil {
			return nil, err // nothing changed: no message leaves either
		}
	}
	// Only now change the state: a refused call changes nothing.
	if c.s.Reservations == nil {
		c.s.Reservations = map[string]string{}
	}
	for item := range c.s.Items {
		if c.s.Reservations[item] != Reserved {
			c.s.Reservations[item] = Pending
		}
	}
	return json.Marshal(c.s)
}

// OnReply implements actor.ReplyObject: a warehouse's answer to a reserve.
func (c *cart) OnReply(_ actor.Context, r actor.MessageReply) error {
	if len(r.Args) == 0 || c.s.Reservations == nil {
		return nil
	}
	item := string(r.Args[0])
	if r.Err != nil {
		c.s.Reservations[item] = "refused: " + r.Err.Error()
	} else {
		c.s.Reservations[item] = Reserved
	}
	return nil
}

// Names lists a view's items, sorted.
func (v View) Names() []string { return slices.Sorted(maps.Keys(v.Items)) }
