package actor

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// OverrunPolicy says what a timer does with ticks that came due while the
// runtime could not deliver them (a pause, a relocation, a slow handler).
//
// A tick is missed when the tick after it has also come due, that is when
// the runtime is at least one whole period late for it. The most recent due
// tick is never missed: it is on time.
type OverrunPolicy int

const (
	// Skip delivers the most recent due tick and drops the missed ones
	// (counted in Timer.Dropped). The next tick is the next one on the
	// schedule after now.
	Skip OverrunPolicy = 1 + iota
	// FireOnce delivers one tick for all the ticks that came due, the missed
	// ones and the on-time one (Tick.Coalesced says how many).
	FireOnce
	// CatchUp delivers every tick that came due, each with its own due time,
	// at most Timer.Spec.MaxCatchUp of them at once; the older ones beyond
	// the limit are dropped (counted in Timer.Dropped).
	CatchUp
)

// String is the policy's name.
func (p OverrunPolicy) String() string {
	switch p {
	case Skip:
		return "Skip"
	case FireOnce:
		return "FireOnce"
	case CatchUp:
		return "CatchUp"
	}
	return fmt.Sprintf("OverrunPolicy(%d)", int(p))
}

// ParseOverrunPolicy reads a policy name, case-insensitively: "skip",
// "fireonce" (or "fire-once", "fire_once"), "catchup" (or "catch-up", "catch_up").
func ParseOverrunPolicy(s string) (OverrunPolicy, error) {
	switch strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(s)) {
	case "skip":
		return Skip, nil
	case "fireonce":
		return FireOnce, nil
	case "catchup":
		return CatchUp, nil
	}
	return 0, fmt.Errorf("%w: unknown overrun policy %q (want skip, fireonce or catchup)", ErrInvalidTimer, s)
}

// Limits of timers.
const (
	// MaxTimers bounds the timers of one object.
	MaxTimers = 64
	// MaxTimerNameLen bounds a timer name in bytes.
	MaxTimerNameLen = 128
	// MinTimerPeriod is the shortest period. Timer times are kept in whole
	// milliseconds, so that they travel exactly.
	MinTimerPeriod = time.Millisecond
	// MaxTimerPeriod is the longest period and the latest first due time.
	MaxTimerPeriod = 366 * 24 * time.Hour
	// MaxCatchUpLimit bounds TimerSpec.MaxCatchUp, and so the ticks one Fire
	// returns.
	MaxCatchUpLimit = 1 << 16
)

// Errors of timers.
var (
	// ErrInvalidTimer: a TimerSpec breaks a rule of TimerSpec.Validate.
	ErrInvalidTimer = wire.Sentinel(pb.Code_CODE_INVALID_ARGUMENT, "actor: invalid timer")
	// ErrTooManyTimers: an object would have more than MaxTimers timers.
	ErrTooManyTimers = wire.Sentinel(pb.Code_CODE_RESOURCE_EXHAUSTED, "actor: too many timers")
	// ErrCorruptState: bytes handed to a decoder or to Restore are not a
	// state it wrote (truncated, out of bounds, non-canonical, another format).
	ErrCorruptState = wire.Sentinel(pb.Code_CODE_DATA_LOST, "actor: corrupt state")
)

// TimerSpec describes a periodic timer.
type TimerSpec struct {
	// Name identifies the timer within its object: 1 to MaxTimerNameLen
	// bytes of letters, digits and - _ . : @ /.
	Name string
	// Period is the time between two ticks: a whole number of milliseconds,
	// from MinTimerPeriod to MaxTimerPeriod.
	Period time.Duration
	// Policy says what happens to ticks missed while the runtime was late.
	Policy OverrunPolicy
	// MaxCatchUp bounds the ticks delivered at once under CatchUp (1 to
	// MaxCatchUpLimit). It must be 0 under the other policies.
	MaxCatchUp int
	// FirstDue is the delay from creation to the first tick; 0 means one
	// Period. A whole number of milliseconds, at most MaxTimerPeriod.
	FirstDue time.Duration
}

// Validate checks the spec; its errors wrap ErrInvalidTimer.
func (s TimerSpec) Validate() error {
	if err := validTimerName(s.Name); err != nil {
		return err
	}
	if s.Period < MinTimerPeriod || s.Period > MaxTimerPeriod {
		return fmt.Errorf("%w: timer %q: period %s out of [%s, %s]", ErrInvalidTimer, s.Name, s.Period, MinTimerPeriod, MaxTimerPeriod)
	}
	if s.Period%time.Millisecond != 0 {
		return fmt.Errorf("%w: timer %q: period %s is not a whole number of milliseconds", ErrInvalidTimer, s.Name, s.Period)
	}
	switch s.Policy {
	case Skip, FireOnce:
		if s.MaxCatchUp != 0 {
			return fmt.Errorf("%w: timer %q: MaxCatchUp %d is only for CatchUp, policy is %s", ErrInvalidTimer, s.Name, s.MaxCatchUp, s.Policy)
		}
	case CatchUp:
		if s.MaxCatchUp < 1 || s.MaxCatchUp > MaxCatchUpLimit {
			return fmt.Errorf("%w: timer %q: MaxCatchUp %d out of [1, %d]", ErrInvalidTimer, s.Name, s.MaxCatchUp, MaxCatchUpLimit)
		}
	default:
		return fmt.Errorf("%w: timer %q: invalid policy %s", ErrInvalidTimer, s.Name, s.Policy)
	}
	if s.FirstDue < 0 || s.FirstDue > MaxTimerPeriod || s.FirstDue%time.Millisecond != 0 {
		return fmt.Errorf("%w: timer %q: first due %s is not a whole number of milliseconds in [0, %s]", ErrInvalidTimer, s.Name, s.FirstDue, MaxTimerPeriod)
	}
	return nil
}

func validTimerName(n string) error {
	if n == "" || len(n) > MaxTimerNameLen {
		return fmt.Errorf("%w: timer name of %d bytes (want 1 to %d)", ErrInvalidTimer, len(n), MaxTimerNameLen)
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':' || c == '@' || c == '/'
		if !ok {
			return fmt.Errorf("%w: timer name %q has byte %q (allowed: letters, digits, - _ . : @ /)", ErrInvalidTimer, n, c)
		}
	}
	return nil
}

// Timer is one timer's schedule and counters. It is plain data: it travels
// with the object's state (Timers.Encode) and resumes on another node from
// exactly where it stopped.
//
// Invariants: DeliveryIndex + Dropped <= ScheduledIndex, with equality
// unless FireOnce coalesced ticks; NextDue is a whole millisecond.
type Timer struct {
	Spec TimerSpec
	// NextDue is the wall time of the next tick (whole milliseconds, UTC).
	NextDue time.Time
	// ScheduledIndex counts the ticks that came due.
	ScheduledIndex uint64
	// DeliveryIndex counts the ticks delivered: the Index of the last one.
	DeliveryIndex uint64
	// Dropped counts the ticks dropped by Skip or by the CatchUp limit.
	Dropped uint64
}

// NewTimer starts a timer at now: its first tick is due at now + FirstDue
// (or + Period), rounded up to a whole millisecond. The spec is not checked
// here; Timers.Set checks it.
func NewTimer(spec TimerSpec, now time.Time) Timer {
	first := spec.FirstDue
	if first == 0 {
		first = spec.Period
	}
	return Timer{Spec: spec, NextDue: msTime(ceilMs(now.Add(first)))}
}

// Fire returns the ticks to deliver at now, and advances the timer past
// now: NextDue becomes the first tick on the schedule after now. It is pure
// (no clock, no I/O); if now is before NextDue it returns nothing and
// changes nothing.
//
// The ticks returned are consumed: the caller must deliver them before the
// timer is encoded again, or they are lost.
func (t *Timer) Fire(now time.Time) []Tick {
	p := t.Spec.Period.Milliseconds()
	if p < 1 {
		return nil
	}
	next, nowMs := ceilMs(t.NextDue), now.UnixMilli()
	if nowMs < next {
		return nil
	}
	k := uint64((nowMs-next)/p) + 1 // ticks due in [next, now]
	last := next + int64(k-1)*p     // the most recent due tick: on time
	t.NextDue = msTime(last + p)
	t.ScheduledIndex += k

	switch t.Spec.Policy {
	case FireOnce:
		t.DeliveryIndex++
		return []Tick{{Name: t.Spec.Name, Index: t.DeliveryIndex, Due: msTime(next), Coalesced: k}}
	case CatchUp:
		n := uint64(max(t.Spec.MaxCatchUp, 1))
		n = min(n, k)
		t.Dropped += k - n
		ticks := make([]Tick, 0, n)
		for i := n; i > 0; i-- {
			t.DeliveryIndex++
			ticks = append(ticks, Tick{Name: t.Spec.Name, Index: t.DeliveryIndex, Due: msTime(last - int64(i-1)*p), Coalesced: 1})
		}
		return ticks
	default: // Skip, and any invalid policy of a hand-built Timer
		t.Dropped += k - 1
		t.DeliveryIndex++
		return []Tick{{Name: t.Spec.Name, Index: t.DeliveryIndex, Due: msTime(last), Coalesced: 1}}
	}
}

// ceilMs is t in Unix milliseconds, rounded up.
func ceilMs(t time.Time) int64 {
	ms := t.UnixMilli() // floor: the nanoseconds of a Time are never negative
	if time.UnixMilli(ms).Before(t) {
		ms++
	}
	return ms
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// Timers is the set of an object's timers, by name. The zero value is an
// empty set. It is not safe for concurrent use: it belongs to the object's
// mailbox, like the object.
type Timers struct {
	byName map[string]*Timer
}

// NewTimers returns an empty set.
func NewTimers() *Timers { return &Timers{} }

// Set creates the timer spec.Name, first due at now + FirstDue (or + Period).
// If a timer of that name exists, Set replaces its schedule and keeps its
// counters, so its tick indices keep growing by one; Cancel then Set starts
// again from index 1.
func (ts *Timers) Set(spec TimerSpec, now time.Time) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	old, ok := ts.byName[spec.Name]
	if !ok && len(ts.byName) >= MaxTimers {
		return fmt.Errorf("%w: %d timers, limit %d (setting %q)", ErrTooManyTimers, len(ts.byName), MaxTimers, spec.Name)
	}
	t := NewTimer(spec, now)
	if ok {
		t.ScheduledIndex, t.DeliveryIndex, t.Dropped = old.ScheduledIndex, old.DeliveryIndex, old.Dropped
	}
	if ts.byName == nil {
		ts.byName = map[string]*Timer{}
	}
	ts.byName[spec.Name] = &t
	return nil
}

// Cancel removes a timer; it reports whether it existed.
func (ts *Timers) Cancel(name string) bool {
	if _, ok := ts.byName[name]; !ok {
		return false
	}
	delete(ts.byName, name)
	return true
}

// Get returns a copy of a timer.
func (ts *Timers) Get(name string) (Timer, bool) {
	t, ok := ts.byName[name]
	if !ok {
		return Timer{}, false
	}
	return *t, true
}

// Len is the number of timers.
func (ts *Timers) Len() int { return len(ts.byName) }

// Names lists the timer names, sorted.
func (ts *Timers) Names() []string {
	names := make([]string, 0, len(ts.byName))
	for n := range ts.byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Next is the earliest NextDue of the timers; false if there are none. The
// runtime sleeps until then (or until the next request) and calls FireDue.
func (ts *Timers) Next() (time.Time, bool) {
	var first time.Time
	found := false
	for _, t := range ts.byName {
		if !found || t.NextDue.Before(first) {
			first, found = t.NextDue, true
		}
	}
	return first, found
}

// FireDue fires every timer at now and returns their ticks in due order
// (ties: by name, then index). Like Timer.Fire, the ticks are consumed: the
// runtime delivers them (Object.OnTimer) in the same mailbox turn, before
// anything can snapshot the object.
func (ts *Timers) FireDue(now time.Time) []Tick {
	var out []Tick
	for _, name := range ts.Names() {
		out = append(out, ts.byName[name].Fire(now)...)
	}
	slices.SortStableFunc(out, func(a, b Tick) int {
		if c := a.Due.Compare(b.Due); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name) // stable: indices stay in order
	})
	return out
}

// Encoding of Timers, version 1 (every integer a varint; the canonical form
// is the only one DecodeTimers accepts):
//
//	'T' 0x01 uvarint(count)
//	per timer, sorted by name:
//	  uvarint(len) name  uvarint(period ms)  byte(policy)  uvarint(max catch-up)
//	  uvarint(first due ms)  varint(next due, Unix ms)
//	  uvarint(scheduled)  uvarint(delivered)  uvarint(dropped)
const (
	timersMagic   = 'T'
	timersVersion = 1
	// maxUnixMs is 9999-12-31T23:59:59.999Z: the latest NextDue a decoder accepts.
	maxUnixMs = 253402300799999
)

// Encode returns the canonical bytes of the set: equal sets give equal bytes.
func (ts *Timers) Encode() []byte {
	b := []byte{timersMagic, timersVersion}
	b = binary.AppendUvarint(b, uint64(len(ts.byName)))
	for _, name := range ts.Names() {
		t := ts.byName[name]
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		b = binary.AppendUvarint(b, uint64(t.Spec.Period.Milliseconds()))
		b = append(b, byte(t.Spec.Policy))
		b = binary.AppendUvarint(b, uint64(t.Spec.MaxCatchUp))
		b = binary.AppendUvarint(b, uint64(t.Spec.FirstDue.Milliseconds()))
		b = binary.AppendVarint(b, t.NextDue.UnixMilli())
		b = binary.AppendUvarint(b, t.ScheduledIndex)
		b = binary.AppendUvarint(b, t.DeliveryIndex)
		b = binary.AppendUvarint(b, t.Dropped)
	}
	return b
}

// DecodeTimers reads what Encode wrote. Every error wraps ErrCorruptState.
func DecodeTimers(b []byte) (*Timers, error) {
	if len(b) < 2 || b[0] != timersMagic {
		return nil, fmt.Errorf("%w: timers: not a timers encoding", ErrCorruptState)
	}
	if b[1] != timersVersion {
		return nil, fmt.Errorf("%w: timers: unsupported version %d", ErrCorruptState, b[1])
	}
	r := reader{b: b[2:]}
	n := r.uvarint("count")
	if r.err == nil && n > MaxTimers {
		return nil, fmt.Errorf("%w: %w: %d timers, limit %d", ErrCorruptState, ErrTooManyTimers, n, MaxTimers)
	}
	ts := &Timers{}
	for i := uint64(0); i < n && r.err == nil; i++ {
		nameLen := r.uvarint("name length")
		if r.err == nil && nameLen > MaxTimerNameLen {
			r.fail("timer name of %d bytes", nameLen)
		}
		name := string(r.bytes(nameLen, "name"))
		period := r.uvarint("period")
		policy := r.byte("policy")
		maxCatchUp := r.uvarint("max catch-up")
		firstDue := r.uvarint("first due")
		nextDue := r.varint("next due")
		var t Timer
		t.ScheduledIndex = r.uvarint("scheduled index")
		t.DeliveryIndex = r.uvarint("delivery index")
		t.Dropped = r.uvarint("dropped")
		if r.err != nil {
			break
		}
		const maxMs = uint64(MaxTimerPeriod / time.Millisecond)
		if period > maxMs || firstDue > maxMs || maxCatchUp > MaxCatchUpLimit {
			r.fail("timer %q: period %d ms, first due %d ms or max catch-up %d out of bounds", name, period, firstDue, maxCatchUp)
			break
		}
		t.Spec = TimerSpec{
			Name: name, Period: time.Duration(period) * time.Millisecond, Policy: OverrunPolicy(policy),
			MaxCatchUp: int(maxCatchUp), FirstDue: time.Duration(firstDue) * time.Millisecond,
		}
		if err := t.Spec.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCorruptState, err)
		}
		if nextDue < 0 || nextDue > maxUnixMs {
			r.fail("timer %q: next due %d ms out of bounds", name, nextDue)
			break
		}
		t.NextDue = msTime(nextDue)
		if t.DeliveryIndex > t.ScheduledIndex || t.Dropped > t.ScheduledIndex-t.DeliveryIndex {
			r.fail("timer %q: delivered %d + dropped %d > scheduled %d", name, t.DeliveryIndex, t.Dropped, t.ScheduledIndex)
			break
		}
		if ts.byName == nil {
			ts.byName = map[string]*Timer{}
		}
		ts.byName[name] = &t
	}
	if err := r.end(); err != nil {
		return nil, fmt.Errorf("%w: timers: %v", ErrCorruptState, err)
	}
	// One state, one encoding: this refuses unsorted or repeated names and
	// overlong varints, so decode and encode are exact inverses.
	if !bytes.Equal(ts.Encode(), b) {
		return nil, fmt.Errorf("%w: timers: not in canonical form", ErrCorruptState)
	}
	return ts, nil
}
