// Package lifecycle holds the rules of an object's life past relocation
// (docs/developing/lifecycle.md): when an idle object may go to sleep. It is pure —
// facts in, a verdict out — so the node's drivers only gather the facts
// and carry the verdict out, and the rule is tested by tables.
package lifecycle

import "time"

// Facts are what the sleep rule judges of one hosted object, gathered by
// its node at one moment.
type Facts struct {
	// After is how long the object may stay idle (its type's SleepAfter,
	// or the node's default; <= 0: never).
	After time.Duration
	// Sleeps: its type may sleep at all (actor.Type.Sleeps).
	Sleeps bool
	// IdleFor is how long since it last ran a request.
	IdleFor time.Duration
	// Serving: activated, not closed, not lost, not claimed by a
	// relocation, and its mailbox in the serving mode.
	Serving bool
	// Busy: a request runs or waits in its mailbox.
	Busy bool
	// Grouped: a group, or a group's member (groups never sleep).
	Grouped bool
	// Sessions bound to it, messages in its outbox, timers armed.
	Sessions, Outbox, Timers int
	// Unpersisted: a durable object whose current state differs from the
	// state last written to etcd (judged on its mailbox only).
	Unpersisted bool
	// Pressed: its node is over a memory limit's soft bound (pressure.go):
	// idleness does not count, only whether a sleep would lose anything.
	Pressed bool
	// ReminderIn is how long until its next reminder is due, at least 1ns
	// (0: it has none).
	ReminderIn time.Duration
}

// ReminderSoon: an object whose next reminder is due within it stays
// awake (the firing would wake it again at once).
const ReminderSoon = 10 * time.Second

// Reason names why an object stays awake ("" : it may sleep).
type Reason string

// Reasons an object stays awake.
const (
	Sleep         Reason = ""
	Never         Reason = "its type never sleeps"
	NotIdle       Reason = "not idle long enough"
	NotServing    Reason = "not serving (activating, moving or closed)"
	Busy          Reason = "a request runs or waits"
	InGroup       Reason = "groups and their members never sleep"
	OpenSession   Reason = "a session is open"
	PendingOutbox Reason = "messages it sent are not answered yet"
	ArmedTimers   Reason = "timers are armed (they fire only while awake)"
	Unpersisted   Reason = "its state differs from the one persisted"
	ReminderDue   Reason = "a reminder is due soon"
)

// Judge is the sleep rule: an object sleeps only when nothing it holds
// in memory would be lost or delayed by it. The checks are ordered from
// the cheapest and most common reason to stay awake.
func Judge(f Facts) Reason {
	switch {
	case !f.Sleeps || f.After <= 0 && !f.Pressed:
		return Never
	case f.IdleFor < f.After && !f.Pressed:
		return NotIdle
	case !f.Serving:
		return NotServing
	case f.Busy:
		return Busy
	case f.Grouped:
		return InGroup
	case f.Sessions > 0:
		return OpenSession
	case f.Outbox > 0:
		return PendingOutbox
	case f.Timers > 0:
		return ArmedTimers
	case f.Unpersisted:
		return Unpersisted
	case f.ReminderIn > 0 && f.ReminderIn < ReminderSoon && !f.Pressed:
		return ReminderDue
	}
	return Sleep
}

// SleepAfter resolves a type's idle bound against its node's default:
// the type's own when set (negative: never), else the node's.
func SleepAfter(typeAfter, nodeDefault time.Duration) time.Duration {
	switch {
	case typeAfter < 0:
		return 0
	case typeAfter > 0:
		return typeAfter
	}
	return max(nodeDefault, 0)
}
