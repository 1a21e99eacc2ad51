package actor

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// ReminderObject is implemented by types that use durable reminders
// (docs/developing/lifecycle.md). A reminder is persisted in etcd with the
// object's state and fires even when the object sleeps, was relocated or
// its node died: the firing wakes it.
type ReminderObject interface {
	// OnReminder runs once for each due time of each reminder, as a
	// request of its own: its effects are persisted and de-duplicated like
	// a request's.
	OnReminder(ctx Context, r Reminder) error
}

// Reminder is one firing of a reminder.
type Reminder struct {
	Name string
	// Due is the due time this firing is for.
	Due time.Time
	// Period is the time between due times (0: the reminder fired once and
	// is gone).
	Period time.Duration
}

// ReminderSpec sets a reminder.
type ReminderSpec struct {
	// Name identifies the reminder within its object, with the rules of a
	// timer name. Setting a name that exists replaces that reminder.
	Name string
	// Due is when it first fires, a whole millisecond; a time in the past
	// fires as soon as it can. At most MaxTimerPeriod from now.
	Due time.Time
	// Period repeats it (0: once): a whole number of milliseconds, at least
	// MinReminderPeriod, at most MaxTimerPeriod.
	Period time.Duration
}

// ReminderMethod is the method of a reminder's firing request (a node
// sends it; the runtime runs OnReminder for it, never Handle).
const ReminderMethod = "meshloc.reminder"

// Limits of reminders.
const (
	// MaxReminders bounds the reminders of one object.
	MaxReminders = 64
	// MinReminderPeriod is the shortest period of a reminder: a firing is a
	// request routed through the cluster, not an in-memory tick.
	MinReminderPeriod = time.Second
)

// Errors of reminders.
var (
	// ErrInvalidReminder: a ReminderSpec breaks a rule of Validate, or the
	// type cannot have reminders (a memory type, or no OnReminder).
	ErrInvalidReminder = wire.Sentinel(pb.Code_CODE_INVALID_ARGUMENT, "actor: invalid reminder")
	// ErrTooManyReminders: an object would have more than MaxReminders.
	ErrTooManyReminders = wire.Sentinel(pb.Code_CODE_RESOURCE_EXHAUSTED, "actor: too many reminders")
)

// Validate checks the spec against now; its errors wrap ErrInvalidReminder.
func (s ReminderSpec) Validate(now time.Time) error {
	if err := validTimerName(s.Name); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidReminder, err)
	}
	switch {
	case s.Due.IsZero() || !s.Due.Equal(s.Due.Truncate(time.Millisecond)):
		return fmt.Errorf("%w: reminder %q: due time %v is not a whole millisecond", ErrInvalidReminder, s.Name, s.Due)
	case s.Due.Sub(now) > MaxTimerPeriod:
		return fmt.Errorf("%w: reminder %q: due more than %s from now", ErrInvalidReminder, s.Name, MaxTimerPeriod)
	case s.Period != 0 && (s.Period < MinReminderPeriod || s.Period > MaxTimerPeriod || s.Period%time.Millisecond != 0):
		return fmt.Errorf("%w: reminder %q: period %s (want 0, or whole milliseconds in [%s, %s])", ErrInvalidReminder, s.Name, s.Period, MinReminderPeriod, MaxTimerPeriod)
	}
	return nil
}

// tagReminder derives a reminder firing's operation id.
const tagReminder = 'R'

// ReminderOperationID is the operation id of the firing of reminder name
// (set as the object's seq-th reminder write) for its due time dueMs, made
// at atMs (the due time, or the later time a late firing was re-based to,
// recorded in etcd: docs/developing/lifecycle.md). Every attempt at one
// firing uses it, so the object's de-duplication table absorbs a retry.
func ReminderOperationID(object, name string, seq uint64, dueMs, atMs int64) wire.OperationID {
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(atMs))
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], seq)
	binary.BigEndian.PutUint64(b[8:], uint64(dueMs))
	return derive(ms[2:], tagReminder, []byte(object), []byte{0}, []byte(name), []byte{0}, b[:])
}
