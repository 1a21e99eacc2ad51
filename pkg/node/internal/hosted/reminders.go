package hosted

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/reminder"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Durable reminders (docs/developing/lifecycle.md): an object's reminder
// definitions live in h.Rem (under h.Mu), are persisted with its state
// (durable.go), and a firing is a request of method reminder.Method that
// a node sends when the schedule says a due time came (pkg/node
// reminders.go). Its operation id is the firing's, so the reply table
// absorbs every retry; the checks here refuse, unrecorded, a firing that
// is not one of the object's due times.

func (c *handlerCtx) SetReminder(spec actor.ReminderSpec) error {
	h := c.h
	if _, ok := h.Inst.(actor.ReminderObject); !ok || !h.Typ.Durable || h.Dur == nil {
		return fmt.Errorf("%w: type %s: reminders need a durable type that implements OnReminder", actor.ErrInvalidReminder, h.Typ.Name)
	}
	if err := spec.Validate(c.now); err != nil {
		return err
	}
	def := reminder.Def{Name: spec.Name, Seq: h.Dur.seq + 1, FirstDueMs: spec.Due.UnixMilli(), PeriodMs: spec.Period.Milliseconds()}
	h.Mu.Lock()
	defer h.Mu.Unlock()
	if i := slices.IndexFunc(h.Rem, func(d reminder.Def) bool { return d.Name == spec.Name }); i >= 0 {
		h.Rem = slices.Clone(h.Rem) // the persisted copy (h.Dur.rem) may share it
		h.Rem[i] = def
		return nil
	}
	if len(h.Rem) >= actor.MaxReminders {
		return fmt.Errorf("%w: %s has %d reminders", actor.ErrTooManyReminders, h.name, len(h.Rem))
	}
	h.Rem = append(slices.Clip(h.Rem), def)
	return nil
}

func (c *handlerCtx) CancelReminder(name string) bool {
	h := c.h
	h.Mu.Lock()
	defer h.Mu.Unlock()
	i := slices.IndexFunc(h.Rem, func(d reminder.Def) bool { return d.Name == name })
	if i < 0 {
		return false
	}
	h.Rem = slices.Delete(slices.Clone(h.Rem), i, i+1)
	return true
}

// reminderInLocked is how long until h's next reminder is due, at least
// 1ns (0: none), for the sleep rule.
func (h *Object) reminderInLocked(now time.Time) time.Duration {
	in := time.Duration(0)
	for _, d := range h.Rem {
		next, _ := d.NextDue(now.UnixMilli())
		if t := max(time.UnixMilli(next).Sub(now), 1); in == 0 || t < in {
			in = t
		}
	}
	return in
}

// checkFiring is the firing a reminder request asks for, or the answer
// (not recorded: nothing ran) that refuses it: malformed, not a due time
// of a reminder the object has (cancelled, set again: the schedule entry
// is dropped), or not due yet on this node's clock (fired again later).
func (h *Object) checkFiring(args [][]byte, now time.Time) (reminder.Firing, *pb.CallReply) {
	f, err := reminder.ParseArgs(args)
	if err != nil {
		return f, h.Reply(pb.Code_CODE_INVALID_ARGUMENT, nil, err.Error())
	}
	if _, ok := h.Inst.(actor.ReminderObject); !ok || !h.Typ.Durable {
		return f, h.Reply(pb.Code_CODE_NOT_FOUND, nil, fmt.Sprintf("%s: type %s has no reminders", h.name, h.Typ.Name))
	}
	h.Mu.Lock()
	_, v := reminder.Admit(h.Rem, f, now.UnixMilli())
	h.Mu.Unlock()
	switch v {
	case reminder.NoSuch:
		return f, h.Reply(pb.Code_CODE_NOT_FOUND, nil, fmt.Sprintf("%s: no reminder %q (seq %d) is due at %d", h.name, f.Name, f.Seq, f.DueMs))
	case reminder.NotDue:
		return f, h.Reply(pb.Code_CODE_UNAVAILABLE, nil, fmt.Sprintf("%s: reminder %q is not due yet on this node's clock", h.name, f.Name))
	}
	return f, nil
}

// runReminder is the turn of firing f: a one-shot reminder is gone with
// it, and OnReminder runs. The turn is persisted even if nothing else
// changed (its reply is what absorbs a retry after a crash), with its
// schedule entry's advance (advance), and answered OK whatever OnReminder
// returned (its error is logged and counted): the firing happened.
func (h *Object) runReminder(hc *handlerCtx, f reminder.Firing) ([]byte, error) {
	n := h.env
	h.Mu.Lock()
	i, _ := reminder.Admit(h.Rem, f, hc.now.UnixMilli()) // checkFiring admitted it, on this mailbox
	def := h.Rem[i]
	if def.PeriodMs == 0 {
		h.Rem = slices.Delete(slices.Clone(h.Rem), i, i+1)
	}
	h.Mu.Unlock()
	h.Dur.fired = append(h.Dur.fired, firedDue{def, f.DueMs})
	lateness := hc.now.Sub(time.UnixMilli(f.DueMs))
	n.metrics.Lifecycle.ReminderLateness.Observe(max(lateness, 0).Seconds())
	err := h.Guard("OnReminder", func() error {
		return h.Inst.(actor.ReminderObject).OnReminder(hc, actor.Reminder{Name: f.Name, Due: time.UnixMilli(f.DueMs), Period: time.Duration(def.PeriodMs) * time.Millisecond})
	})
	switch {
	case errors.Is(err, actor.ErrPanicked):
		n.metrics.Lifecycle.ReminderFirings.WithLabelValues("panicked").Inc()
		return nil, err
	case err != nil:
		n.metrics.Lifecycle.ReminderFirings.WithLabelValues("error").Inc()
		n.log.Warn().Err(err).Str("object", h.name).Str("reminder", f.Name).Int64("dueMs", f.DueMs).Msg("OnReminder returned an error; the firing counts as done")
	default:
		n.metrics.Lifecycle.ReminderFirings.WithLabelValues("ok").Inc()
	}
	return nil, nil
}

// firingLabel is f as the execution log names it.
func firingLabel(f reminder.Firing) string {
	return f.Name + "@" + strconv.FormatUint(f.Seq, 10) + "@" + strconv.FormatInt(f.DueMs, 10)
}

// scheduleLocked are the schedule entries of the reminders in rem that are
// not in the persisted prev (set by the turns since the last write).
func (h *Object) schedule(rem, prev []reminder.Def, gen int64) []reminder.Scheduled {
	var out []reminder.Scheduled
	for _, d := range rem {
		if !slices.Contains(prev, d) {
			out = append(out, reminder.Schedule(h.name, gen, d, d.FirstDueMs))
		}
	}
	return out
}

// firedDue is a due time a turn fired, of the reminder def.
type firedDue struct {
	def   reminder.Def
	dueMs int64
}

// advance adds to req the schedule changes of the due times fired by its
// turn: each entry removed, and a periodic reminder's next one put while
// the reminder is still as it fired (rem: the reminders after the turn;
// one the turn cancelled or set again has no next entry of its old seq).
func advance(req *authority.PersistRequest, object string, gen int64, fired []firedDue, rem []reminder.Def) {
	for _, f := range fired {
		done, next, ok := reminder.After(object, gen, f.def, f.dueMs)
		req.Unschedule = append(req.Unschedule, done)
		if ok && slices.Contains(rem, f.def) {
			req.Schedule = append(req.Schedule, next)
		}
	}
}
