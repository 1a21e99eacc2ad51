package builtin

import (
	"strconv"

	"github.com/meshloc/meshloc/pkg/actor"
)

// counter is an int64.
//
//	add N   N: a decimal int64, may be negative  → {"value":v}
//	get                                          → {"value":v}
//	delete  ends the counter (actor.Context.Delete) → {"value":v}, its last value
//
// An add that would overflow is rejected.
type counter struct {
	value int64
}

type counterState struct {
	V     int   `json:"v"`
	Value int64 `json:"value"`
}

// valueReply is {"value":v}, as encoding/json writes it, without its
// reflection: the counter is the type every call benchmark measures.
func valueReply(v int64) ([]byte, error) {
	b := make([]byte, 0, 32)
	b = append(b, `{"value":`...)
	b = strconv.AppendInt(b, v, 10)
	return append(b, '}'), nil
}

// Handle implements actor.Object.
func (c *counter) Handle(ctx actor.Context, method string, args [][]byte) ([]byte, error) {
	switch method {
	case "add":
		if err := wantArgs(CounterType, method, args, "N"); err != nil {
			return nil, err
		}
		n, err := parseInt64("N", args[0])
		if err != nil {
			return nil, err
		}
		v := c.value + n
		if (n > 0 && v < c.value) || (n < 0 && v > c.value) {
			return nil, actor.Rejected("counter at %d: adding %d would overflow", c.value, n)
		}
		c.value = v
		return valueReply(c.value)
	case "get":
		if err := wantArgs(CounterType, method, args); err != nil {
			return nil, err
		}
		return valueReply(c.value)
	case "delete":
		if err := wantArgs(CounterType, method, args); err != nil {
			return nil, err
		}
		if err := ctx.Delete(); err != nil {
			return nil, err
		}
		return valueReply(c.value)
	}
	return nil, actor.UnknownMethod(CounterType, method)
}

// Snapshot implements actor.Object.
func (c *counter) Snapshot() ([]byte, error) {
	return snapshot(counterState{V: stateVersion, Value: c.value})
}

// Restore implements actor.Object.
func (c *counter) Restore(b []byte) error {
	var s counterState
	if err := restore(CounterType, b, &s, &s.V); err != nil {
		return err
	}
	c.value = s.Value
	return nil
}
