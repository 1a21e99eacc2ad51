package lifecycle_test

import (
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/lifecycle"
)

func TestJudge(t *testing.T) {
	idle := lifecycle.Facts{After: time.Minute, Sleeps: true, IdleFor: 2 * time.Minute, Serving: true}
	cases := []struct {
		name string
		edit func(*lifecycle.Facts)
		want lifecycle.Reason
	}{
		{"idle and free", func(*lifecycle.Facts) {}, lifecycle.Sleep},
		{"exactly at the bound", func(f *lifecycle.Facts) { f.IdleFor = f.After }, lifecycle.Sleep},
		{"type never sleeps", func(f *lifecycle.Facts) { f.Sleeps = false }, lifecycle.Never},
		{"no bound", func(f *lifecycle.Facts) { f.After = 0 }, lifecycle.Never},
		{"recently used", func(f *lifecycle.Facts) { f.IdleFor = time.Second }, lifecycle.NotIdle},
		{"moving", func(f *lifecycle.Facts) { f.Serving = false }, lifecycle.NotServing},
		{"request waiting", func(f *lifecycle.Facts) { f.Busy = true }, lifecycle.Busy},
		{"group member", func(f *lifecycle.Facts) { f.Grouped = true }, lifecycle.InGroup},
		{"session open", func(f *lifecycle.Facts) { f.Sessions = 1 }, lifecycle.OpenSession},
		{"outbox pending", func(f *lifecycle.Facts) { f.Outbox = 2 }, lifecycle.PendingOutbox},
		{"timer armed", func(f *lifecycle.Facts) { f.Timers = 1 }, lifecycle.ArmedTimers},
		{"change not persisted", func(f *lifecycle.Facts) { f.Unpersisted = true }, lifecycle.Unpersisted},
	}
	for _, c := range cases {
		f := idle
		c.edit(&f)
		if got := lifecycle.Judge(f); got != c.want {
			t.Errorf("%s: Judge = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestSleepAfter(t *testing.T) {
	for _, c := range []struct{ typ, node, want time.Duration }{
		{0, 0, 0},
		{0, time.Hour, time.Hour},
		{time.Minute, time.Hour, time.Minute},
		{-1, time.Hour, 0},
		{0, -time.Second, 0},
	} {
		if got := lifecycle.SleepAfter(c.typ, c.node); got != c.want {
			t.Errorf("SleepAfter(%v, %v) = %v, want %v", c.typ, c.node, got, c.want)
		}
	}
}

// TestKnown: what a caller that knew one generation is told.
func TestKnown(t *testing.T) {
	for _, c := range []struct {
		known, current, deleted int64
		durable                 bool
		want                    lifecycle.Since
	}{
		{0, 5, 4, false, lifecycle.Same},      // knew nothing
		{5, 5, 4, false, lifecycle.Same},      // knew this one
		{6, 5, 0, false, lifecycle.Same},      // a newer one than here: not ours to judge
		{4, 5, 4, false, lifecycle.Deleted},   // knew the deleted one
		{2, 5, 4, true, lifecycle.Deleted},    // an older one, deleted since: deleted, also durable
		{3, 5, 0, false, lifecycle.StateLost}, // a memory object re-created
		{3, 5, 0, true, lifecycle.Same},       // a durable object recovered: nothing lost
		{4, 5, 2, false, lifecycle.StateLost}, // deleted before it knew it: its own was lost
		{4, 5, 2, true, lifecycle.Same},
	} {
		if got := lifecycle.Known(c.known, c.current, c.deleted, c.durable); got != c.want {
			t.Errorf("Known(%d, %d, %d, %v) = %d, want %d", c.known, c.current, c.deleted, c.durable, got, c.want)
		}
	}
}

// TestMadeBefore: an operation made at or before the last delete is refused.
func TestMadeBefore(t *testing.T) {
	for _, c := range []struct {
		op, at int64
		want   bool
	}{{100, 0, false}, {0, 100, false}, {99, 100, true}, {100, 100, true}, {101, 100, false}} {
		if got := lifecycle.MadeBefore(c.op, c.at); got != c.want {
			t.Errorf("MadeBefore(%d, %d) = %v, want %v", c.op, c.at, got, c.want)
		}
	}
}

func TestJudgeReminderSoon(t *testing.T) {
	f := lifecycle.Facts{After: time.Minute, Sleeps: true, IdleFor: time.Hour, Serving: true}
	for _, c := range []struct {
		in   time.Duration
		want lifecycle.Reason
	}{{0, lifecycle.Sleep}, {time.Nanosecond, lifecycle.ReminderDue}, {lifecycle.ReminderSoon - 1, lifecycle.ReminderDue}, {lifecycle.ReminderSoon, lifecycle.Sleep}} {
		f.ReminderIn = c.in
		if got := lifecycle.Judge(f); got != c.want {
			t.Errorf("reminder in %s: lifecycle.Judge = %q, want %q", c.in, got, c.want)
		}
	}
	f.ReminderIn, f.Pressed = time.Nanosecond, true
	if got := lifecycle.Judge(f); got != lifecycle.Sleep {
		t.Errorf("pressed: lifecycle.Judge = %q, want sleep", got)
	}
}
