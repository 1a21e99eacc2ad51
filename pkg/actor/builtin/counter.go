package builtin

import (
	"fmt"
	"strconv"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
)

// counter is an int64.
//
//	add N   N: a decimal int64, may be negative  → {"value":v}
//	get                                          → {"value":v}
//	delete  ends the counter (actor.Context.Delete) → {"value":v}, its last value
//	remind NAME IN PERIOD  sets reminder NAME due IN ms from now, repeating
//	        every PERIOD ms (0: once) → {"value":v,"dueMs":d}; durable only
//	unremind NAME  cancels it → {"value":v}
//
// Each reminder firing adds 1 to a separate count, "fired" in its state
// (the value is the adds' alone). An add that would overflow is rejected.
type counter struct {
	value int64
	fired int64
}

type counterState struct {
	V     int   `json:"v"`
	Value int64 `json:"value"`
	Fired int64 `json:"fired,omitempty"`
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
	case "remind", "unremind":
		return c.remind(ctx, method, args)
	}
	return nil, actor.UnknownMethod(CounterType, method)
}

// remind is the counter's remind and unremind.
func (c *counter) remind(ctx actor.Context, method string, args [][]byte) ([]byte, error) {
	if method == "unremind" {
		if err := wantArgs(CounterType, method, args, "NAME"); err != nil {
			return nil, err
		}
		ctx.CancelReminder(string(args[0]))
		return valueReply(c.value)
	}
	if err := wantArgs(CounterType, method, args, "NAME", "IN", "PERIOD"); err != nil {
		return nil, err
	}
	in, err := parseInt64("IN", args[1])
	if err != nil {
		return nil, err
	}
	period, err := parseInt64("PERIOD", args[2])
	if err != nil {
		return nil, err
	}
	if in < 0 || in > int64(actor.MaxTimerPeriod/time.Millisecond) || period < 0 || period > int64(actor.MaxTimerPeriod/time.Millisecond) {
		return nil, actor.InvalidArgument("IN %d and PERIOD %d must be in [0, %d] ms", in, period, actor.MaxTimerPeriod.Milliseconds())
	}
	due := ctx.Now().Truncate(time.Millisecond).Add(time.Duration(in) * time.Millisecond)
	if err := ctx.SetReminder(actor.ReminderSpec{Name: string(args[0]), Due: due, Period: time.Duration(period) * time.Millisecond}); err != nil {
		return nil, err
	}
	return []byte(`{"value":` + strconv.FormatInt(c.value, 10) + `,"dueMs":` + strconv.FormatInt(due.UnixMilli(), 10) + `}`), nil
}

// OnReminder implements actor.ReminderObject: it counts the firing.
func (c *counter) OnReminder(actor.Context, actor.Reminder) error {
	c.fired++
	return nil
}

// Snapshot implements actor.Object.
func (c *counter) Snapshot() ([]byte, error) {
	return snapshot(counterState{V: stateVersion, Value: c.value, Fired: c.fired})
}

// Restore implements actor.Object.
func (c *counter) Restore(b []byte) error {
	var s counterState
	if err := restore(CounterType, b, &s, &s.V); err != nil {
		return err
	}
	if s.Fired < 0 {
		return fmt.Errorf("%w: %s: fired %d", actor.ErrCorruptState, CounterType, s.Fired)
	}
	c.value, c.fired = s.Value, s.Fired
	return nil
}
