package lease

import (
	"errors"
	"fmt"
	"time"
)

// Status is what an owner may do with its lease at an instant. The zero value
// is invalid.
type Status int

const (
	// Valid: confirmed, with more than Margin left before the local deadline.
	// New work may start.
	Valid Status = 1 + iota
	// Unusable: within Margin of the local deadline and no newer confirmation.
	// Work in flight may finish; nothing new starts (no request, no PREPARE,
	// no ownership Txn). It becomes Valid again if a keep-alive is confirmed in
	// time (like the stasis window of CockroachDB's lease status).
	Unusable
	// Expired: the local deadline passed unconfirmed. Final: the keeper has
	// fenced itself (Ctx is done with ErrLeaseExpired) or is about to.
	Expired
	// Lost: etcd said the lease or the owner key is gone. Final.
	Lost
	// Closed: Close was called. Final.
	Closed
)

func (s Status) String() string {
	switch s {
	case Valid:
		return "valid"
	case Unusable:
		return "unusable"
	case Expired:
		return "expired"
	case Lost:
		return "lost"
	case Closed:
		return "closed"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// StatusInput is everything Evaluate looks at: a snapshot of a keeper.
type StatusInput struct {
	// Deadline is the conservative local deadline: send time of the newest
	// confirmed keep-alive (or of the Grant) + the TTL etcd granted − Margin.
	// Monotonic. A zero Deadline is always Expired.
	Deadline time.Time
	// Margin is the width of the Unusable window before Deadline.
	Margin time.Duration
	// Expired is set once the keeper fenced itself because Deadline passed; it
	// is Expired whatever now says.
	Expired bool
	// Lost is set once etcd said the lease or the owner key is gone.
	Lost bool
	// Closed is set once Close was called.
	Closed bool
}

// Evaluate is the status of in at now. Pure. The terminal facts win over time,
// in the order Lost, Closed, Expired (a keeper sets only the first of them
// that happens, so the order matters only for hand-built inputs).
//
//	now <  Deadline − Margin             Valid
//	Deadline − Margin <= now < Deadline  Unusable
//	Deadline <= now                      Expired
func Evaluate(in StatusInput, now time.Time) Status {
	switch {
	case in.Lost:
		return Lost
	case in.Closed:
		return Closed
	case in.Expired || !now.Before(in.Deadline):
		return Expired
	case !now.Before(in.Deadline.Add(-in.Margin)):
		return Unusable
	default:
		return Valid
	}
}

// state is the pure core of a Keeper: what it knows of its lease and the rules
// that move it. No I/O and no clock: every method is told now. The Keeper
// holds it under its mutex; the timeline test drives it directly.
type state struct {
	owner  string
	lease  int64
	margin time.Duration

	ttl      time.Duration // TTL etcd granted in the newest confirmation
	lastSent time.Time     // send time of the newest confirmed keep-alive (or of the Grant)
	deadline time.Time     // lastSent + ttl − margin
	cause    error         // nil while valid; set once, final
}

// newState is the state right after a Grant sent at sentAt returned ttl.
func newState(owner string, lease int64, margin time.Duration, sentAt time.Time, ttl time.Duration) state {
	return state{owner: owner, lease: lease, margin: margin, ttl: ttl, lastSent: sentAt, deadline: sentAt.Add(ttl - margin)}
}

// confirm applies a keep-alive sent at sentAt whose reply, granting ttl,
// arrived at now. It moves the deadline only if the keeper is still valid, the
// reply is to a newer send than the last confirmed one, and it arrived before
// the current deadline: a late confirmation does not resurrect a lease that
// the keeper must already consider expired.
//
// The new deadline replaces the old one rather than taking the larger: etcd
// sets the expiry to (receive time + TTL) on each renewal, so only the newest
// confirmed send bounds it. etcd's TTL is fixed at Grant, so in practice the
// deadline only moves forward. It returns whether the deadline moved, and the
// cause if this call fenced the keeper.
func (s *state) confirm(sentAt time.Time, ttl time.Duration, now time.Time) (moved bool, fenced error) {
	if s.cause != nil {
		return false, nil
	}
	if ttl <= 0 {
		return false, s.fence(s.lostErr("keep-alive returned TTL %d", int64(ttl/time.Second)))
	}
	if !now.Before(s.deadline) {
		return false, s.fence(s.expiredErr("confirmation arrived after the local deadline"))
	}
	sentAt = countFrom(sentAt, now)
	if !sentAt.After(s.lastSent) {
		return false, nil
	}
	d := sentAt.Add(ttl - s.margin)
	moved = !d.Equal(s.deadline)
	s.lastSent, s.ttl, s.deadline = sentAt, ttl, d
	return moved, nil
}

// expireIfDue fences the keeper if now has reached the deadline.
func (s *state) expireIfDue(now time.Time) (fenced error) {
	if s.cause != nil || now.Before(s.deadline) {
		return nil
	}
	return s.fence(s.expiredErr("no keep-alive confirmed before the local deadline"))
}

// fence records cause if the keeper was still valid, and returns it then.
func (s *state) fence(cause error) error {
	if s.cause != nil {
		return nil
	}
	s.cause = cause
	return cause
}

func (s *state) input() StatusInput {
	in := StatusInput{Deadline: s.deadline, Margin: s.margin}
	if s.cause != nil { // every call reads this: no errors.Is frames while the lease is fine
		in.Expired = errors.Is(s.cause, ErrLeaseExpired)
		in.Lost = errors.Is(s.cause, ErrLeaseLost)
		in.Closed = errors.Is(s.cause, ErrClosed)
	}
	return in
}

func (s *state) expiredErr(why string) error {
	return fmt.Errorf("%w: owner %s lease %x: %s (last confirmed send + TTL %s − margin %s)", ErrLeaseExpired, s.owner, s.lease, why, s.ttl, s.margin)
}

func (s *state) lostErr(format string, args ...any) error {
	return fmt.Errorf("%w: owner %s lease %x: %s", ErrLeaseLost, s.owner, s.lease, fmt.Sprintf(format, args...))
}
