package actor_test

import (
	"fmt"
	"strconv"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// highWater remembers the largest number it was shown.
type highWater struct{ max int64 }

func (h *highWater) Handle(_ actor.Context, method string, args [][]byte) ([]byte, error) {
	switch method {
	case "see":
		if len(args) != 1 {
			return nil, actor.InvalidArgument("see takes 1 argument, got %d", len(args))
		}
		n, err := strconv.ParseInt(string(args[0]), 10, 64)
		if err != nil {
			return nil, actor.InvalidArgument("%q is not a number", args[0])
		}
		h.max = max(h.max, n)
		return fmt.Appendf(nil, `{"max":%d}`, h.max), nil
	}
	return nil, actor.UnknownMethod("highwater", method)
}

func (h *highWater) Snapshot() ([]byte, error) { return strconv.AppendInt(nil, h.max, 10), nil }

func (h *highWater) Restore(b []byte) error {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("%w: highwater: %v", actor.ErrCorruptState, err)
	}
	h.max = n
	return nil
}

// callContext is the little a handler sees of the runtime.
type callContext struct{ timers actor.Timers }

func (c *callContext) Object() keyspace.Object              { return keyspace.Actor("highwater", "h1") }
func (c *callContext) Fence() actor.Fence                   { return actor.Fence{OwnerID: "n1"} }
func (c *callContext) Now() time.Time                       { return time.Unix(0, 0) }
func (c *callContext) SetTimer(spec actor.TimerSpec) error  { return c.timers.Set(spec, c.Now()) }
func (c *callContext) Delete() error                        { return nil }
func (c *callContext) CancelTimer(name string) bool         { return c.timers.Cancel(name) }
func (c *callContext) SetReminder(actor.ReminderSpec) error { return actor.ErrInvalidReminder }
func (c *callContext) CancelReminder(string) bool           { return false }
func (c *callContext) Push([]byte) error                    { return actor.ErrNoSession }
func (c *callContext) Publish([]byte) error                 { return nil }
func (c *callContext) Send(string, string, ...[]byte) error { return nil }
func (c *callContext) Ask(string, string, ...[]byte) error  { return nil }

func Example() {
	reg := actor.NewRegistry()
	err := reg.Register(actor.Type{Name: "highwater", New: func() actor.Object { return &highWater{} }})
	if err != nil {
		panic(err)
	}

	typ, _ := reg.Lookup("highwater")
	obj, ctx := typ.New(), &callContext{}
	for _, n := range []string{"3", "9", "4", "x"} {
		reply, err := obj.Handle(ctx, "see", [][]byte{[]byte(n)})
		fmt.Printf("see %s → %s %v\n", n, reply, err)
	}

	// A move: the state leaves in a snapshot and resumes in a fresh instance.
	state, _ := obj.Snapshot()
	moved := typ.New()
	if err := moved.Restore(state); err != nil {
		panic(err)
	}
	reply, _ := moved.Handle(ctx, "see", [][]byte{[]byte("5")})
	fmt.Printf("after the move: %s\n", reply)
	// Output:
	// see 3 → {"max":3} <nil>
	// see 9 → {"max":9} <nil>
	// see 4 → {"max":9} <nil>
	// see x →  actor: invalid argument: "x" is not a number
	// after the move: {"max":9}
}

// Timers are state: they are set by a handler, travel in the snapshot with
// the object, and fire on whichever node holds it when they come due.
func ExampleTimers() {
	start := time.Unix(1000, 0)
	var ts actor.Timers
	if err := ts.Set(actor.TimerSpec{Name: "expire", Period: 30 * time.Minute, Policy: actor.Skip}, start); err != nil {
		panic(err)
	}
	// The object moves: its timers go in the payload as bytes.
	moved, err := actor.DecodeTimers(ts.Encode())
	if err != nil {
		panic(err)
	}
	next, ok := moved.Next()
	fmt.Println(ok, next.Sub(start))
	// Output:
	// true 30m0s
}
