package lease

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// A timeline is a transcript of what happens to one lease, in time order:
// at each step an event (or none) is applied to the pure state at instant
// t0+at, then the status at that instant and the deadline are checked. TTL 5s
// and Margin 1s throughout, so a grant sent at 0 has its deadline at 4s and
// its Unusable window from 3s.
type step struct {
	name     string
	at       time.Duration // the instant of the event, and the "now" of the check
	ev       event         // nil: time passes, nothing happens
	want     Status
	deadline time.Duration // expected deadline, from t0
}

type event func(s *state, now time.Time)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	tlTTL    = 5 * time.Second
	tlMargin = 1 * time.Second
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// granted: the Grant was sent at sent and etcd returned ttl.
func granted(sent, ttl time.Duration) event {
	return func(s *state, _ time.Time) { *s = newState("n1", 0x1, tlMargin, t0.Add(sent), ttl) }
}

// confirmed: the reply to a keep-alive sent at sent, granting ttl, is processed now.
func confirmed(sent, ttl time.Duration) event {
	return func(s *state, now time.Time) { s.confirm(t0.Add(sent), ttl, now) }
}

// timerFires: the deadline goroutine wakes up (or Err is called).
func timerFires() event { return func(s *state, now time.Time) { s.expireIfDue(now) } }

// notFound: a keep-alive answered "lease not found".
func notFound() event {
	return func(s *state, _ time.Time) { s.fence(s.lostErr("keep-alive: lease not found")) }
}

// closed: Close was called.
func closed() event {
	return func(s *state, _ time.Time) { s.fence(fmt.Errorf("%w: test", ErrClosed)) }
}

var timelines = []struct {
	name  string
	steps []step
}{
	{"steady renewals", []step{
		{"granted", 0, granted(0, tlTTL), Valid, ms(4000)},
		{"keepalive sent at 1.666s, confirmed at 1.700s", ms(1700), confirmed(ms(1666), tlTTL), Valid, ms(5666)},
		{"reply to an older send (1.000s) is ignored", ms(1800), confirmed(ms(1000), tlTTL), Valid, ms(5666)},
		{"keepalive sent at 3.333s, confirmed at 3.400s", ms(3400), confirmed(ms(3333), tlTTL), Valid, ms(7333)},
		{"the deadline counts from the send, not the reply: sent 4.0s, confirmed 5.9s", ms(5900), confirmed(ms(4000), tlTTL), Valid, ms(8000)},
		{"one instant before the unusable window", ms(6999), nil, Valid, ms(8000)},
		{"etcd granted more than asked: sent 7.0s with TTL 10s", ms(7050), confirmed(ms(7000), 10*time.Second), Valid, ms(16000)},
		{"timer fires early: nothing to do", ms(7100), timerFires(), Valid, ms(16000)},
	}},
	{"partition until expiry", []step{
		{"granted", 0, granted(0, tlTTL), Valid, ms(4000)},
		{"keepalives fail, time passes", ms(2500), nil, Valid, ms(4000)},
		{"deadline − margin: unusable window starts", ms(3000), nil, Unusable, ms(4000)},
		{"last instant before the deadline", ms(3999), nil, Unusable, ms(4000)},
		{"now == deadline, timer not yet fired", ms(4000), nil, Expired, ms(4000)},
		{"deadline timer fires", ms(4010), timerFires(), Expired, ms(4000)},
		{"confirmation late: sent 3.9s, processed 4.2s, does not resurrect", ms(4200), confirmed(ms(3900), tlTTL), Expired, ms(4000)},
		{"expiry is final even evaluated at an earlier instant", ms(1000), nil, Expired, ms(4000)},
	}},
	{"recovery inside the unusable window", []step{
		{"granted", 0, granted(0, tlTTL), Valid, ms(4000)},
		{"unusable", ms(3200), nil, Unusable, ms(4000)},
		{"keepalive sent at 3.3s, confirmed at 3.9s", ms(3900), confirmed(ms(3300), tlTTL), Valid, ms(7300)},
		{"past the old deadline: still valid", ms(4500), timerFires(), Valid, ms(7300)},
	}},
	{"confirmation late, before the timer fired", []step{
		{"granted", 0, granted(0, tlTTL), Valid, ms(4000)},
		{"sent 2.0s, reply processed exactly at the deadline", ms(4000), confirmed(ms(2000), tlTTL), Expired, ms(4000)},
		{"a later, timely-looking reply changes nothing", ms(4100), confirmed(ms(4050), tlTTL), Expired, ms(4000)},
	}},
	{"newest reply with a smaller TTL moves the deadline back", []step{
		{"granted with 10s", 0, granted(0, 10*time.Second), Valid, ms(9000)},
		{"sent 1.0s, confirmed with TTL 5s", ms(1100), confirmed(ms(1000), tlTTL), Valid, ms(5000)},
		{"so the unusable window starts at 4s", ms(4000), nil, Unusable, ms(5000)},
	}},
	{"lost", []step{
		{"granted", 0, granted(0, tlTTL), Valid, ms(4000)},
		{"keep-alive: lease not found", ms(1000), notFound(), Lost, ms(4000)},
		{"after lost: a reply is ignored", ms(1300), confirmed(ms(1200), tlTTL), Lost, ms(4000)},
		{"after lost: Close keeps the first cause", ms(1500), closed(), Lost, ms(4000)},
		{"after lost: past the deadline, still lost", ms(10000), timerFires(), Lost, ms(4000)},
	}},
	{"reply with TTL 0 means lost", []step{
		{"granted", 0, granted(0, tlTTL), Valid, ms(4000)},
		{"sent 1.0s, TTL 0", ms(1100), confirmed(ms(1000), 0), Lost, ms(4000)},
	}},
	{"closed", []step{
		{"granted", 0, granted(0, tlTTL), Valid, ms(4000)},
		{"close", ms(1000), closed(), Closed, ms(4000)},
		{"after close: a reply is ignored", ms(1200), confirmed(ms(1100), tlTTL), Closed, ms(4000)},
		{"after close: past the deadline, still closed", ms(5000), timerFires(), Closed, ms(4000)},
	}},
	{"grant reply already too late", []step{
		{"granted with TTL 1s ≤ margin: deadline at the send", 0, granted(0, time.Second), Expired, 0},
	}},
}

func TestStatusTimeline(t *testing.T) {
	for _, tl := range timelines {
		t.Run(tl.name, func(t *testing.T) {
			var s state
			for i, st := range tl.steps {
				now := t0.Add(st.at)
				if st.ev != nil {
					st.ev(&s, now)
				}
				if got := Evaluate(s.input(), now); got != st.want {
					t.Errorf("step %d %q at %s: status %s, want %s", i, st.name, st.at, got, st.want)
				}
				if got := s.deadline.Sub(t0); got != st.deadline {
					t.Errorf("step %d %q at %s: deadline %s, want %s", i, st.name, st.at, got, st.deadline)
				}
			}
		})
	}
}

func TestStateCauseIsFinalAndTyped(t *testing.T) {
	s := newState("n1", 0x1, tlMargin, t0, tlTTL)
	err := s.expireIfDue(t0.Add(tlTTL))
	if !errors.Is(err, ErrLeaseExpired) || !errors.Is(s.cause, ErrLeaseExpired) {
		t.Fatalf("expireIfDue at the deadline: %v, cause %v; want ErrLeaseExpired", err, s.cause)
	}
	if again := s.fence(ErrLeaseLost); again != nil || !errors.Is(s.cause, ErrLeaseExpired) {
		t.Fatalf("second fence: returned %v, cause %v; want nil and the first cause kept", again, s.cause)
	}
}

func TestEvaluatePrecedence(t *testing.T) {
	deadline := t0.Add(10 * time.Second)
	for _, tc := range []struct {
		name string
		in   StatusInput
		now  time.Time
		want Status
	}{
		{"zero input is expired", StatusInput{}, t0, Expired},
		{"no margin: valid until the deadline", StatusInput{Deadline: deadline}, deadline.Add(-time.Nanosecond), Valid},
		{"lost beats closed", StatusInput{Deadline: deadline, Lost: true, Closed: true}, t0, Lost},
		{"closed beats expired", StatusInput{Deadline: deadline, Closed: true, Expired: true}, t0, Closed},
		{"expired flag beats time", StatusInput{Deadline: deadline, Margin: time.Second, Expired: true}, t0, Expired},
	} {
		if got := Evaluate(tc.in, tc.now); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestStatusString(t *testing.T) {
	for s, want := range map[Status]string{Valid: "valid", Unusable: "unusable", Expired: "expired", Lost: "lost", Closed: "closed", 0: "Status(0)"} {
		if s.String() != want {
			t.Errorf("Status(%d).String() = %q, want %q", int(s), s.String(), want)
		}
	}
}
