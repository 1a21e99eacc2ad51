package builtin

import (
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// fakeContext is the runtime as a handler sees it: a fixed fence, a clock
// the test moves, and the object's timers.
type fakeContext struct {
	obj    keyspace.Object
	now    time.Time
	timers *actor.Timers
	sent   []actor.OutMessage // Send and Ask, in order
}

var _ actor.Context = (*fakeContext)(nil)

func newFakeContext(typ string) *fakeContext {
	return &fakeContext{
		obj:    keyspace.Actor(typ, "t1"),
		now:    time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		timers: actor.NewTimers(),
	}
}

func (c *fakeContext) Object() keyspace.Object { return c.obj }
func (c *fakeContext) Fence() actor.Fence {
	return actor.Fence{OwnerID: "n1", OwnerGeneration: 7, ObjectGeneration: 1, AuthorityGeneration: 3}
}
func (c *fakeContext) Now() time.Time                       { return c.now }
func (c *fakeContext) SetTimer(spec actor.TimerSpec) error  { return c.timers.Set(spec, c.now) }
func (c *fakeContext) Delete() error                        { return nil }
func (c *fakeContext) CancelTimer(name string) bool         { return c.timers.Cancel(name) }
func (c *fakeContext) SetReminder(actor.ReminderSpec) error { return actor.ErrInvalidReminder }
func (c *fakeContext) CancelReminder(string) bool           { return false }
func (c *fakeContext) Push([]byte) error                    { return actor.ErrNoSession }
func (c *fakeContext) Publish([]byte) error                 { return nil }
func (c *fakeContext) Send(to, method string, args ...[]byte) error {
	return c.record(to, method, args, false)
}
func (c *fakeContext) Ask(to, method string, args ...[]byte) error {
	return c.record(to, method, args, true)
}

func (c *fakeContext) record(to, method string, args [][]byte, ask bool) error {
	if err := actor.ValidateMessage(to, method, args); err != nil {
		return err
	}
	c.sent = append(c.sent, actor.OutMessage{To: to, Method: method, Args: args, Ask: ask})
	return nil
}

// advance moves the clock and delivers the due ticks, as the runtime's
// mailbox does in one turn.
func (c *fakeContext) advance(obj actor.Object, d time.Duration) error {
	c.now = c.now.Add(d)
	for _, tk := range c.timers.FireDue(c.now) {
		if err := obj.(actor.TimerObject).OnTimer(c, tk); err != nil {
			return err
		}
	}
	return nil
}
