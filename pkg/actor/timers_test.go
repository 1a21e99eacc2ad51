package actor

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// t0 is the origin of every timeline in these tests.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

type wantTick struct {
	index     uint64
	due       time.Duration // since t0
	coalesced uint64
}

// fireStep is one line of a timeline: Fire at t0+at, and what must come out.
type fireStep struct {
	name    string
	at      time.Duration
	want    []wantTick
	next    time.Duration // NextDue afterwards, since t0
	sched   uint64
	dropped uint64
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// The timeline shared by the policy tables: period 100 ms, created at t0.
//
//	t0 ─100─200─300─400─500─600─▶
//	    ✓   ✓   ·   ·   ✓   ✓      fires at 100, 250, 570, 600
//	                              (at 570 the ticks of 300 and 400 are missed)
func TestTimerFirePolicies(t *testing.T) {
	tests := []struct {
		name  string
		spec  TimerSpec
		steps []fireStep
	}{
		{
			name: "Skip drops the missed ticks and keeps the on-time one",
			spec: TimerSpec{Name: "t", Period: ms(100), Policy: Skip},
			steps: []fireStep{
				{name: "early", at: ms(99), next: ms(100)},
				{name: "on time", at: ms(100), want: []wantTick{{1, ms(100), 1}}, next: ms(200), sched: 1},
				{name: "between ticks", at: ms(150), next: ms(200), sched: 1},
				{name: "late, but not past a tick", at: ms(250), want: []wantTick{{2, ms(200), 1}}, next: ms(300), sched: 2},
				{name: "late past two ticks", at: ms(570), want: []wantTick{{3, ms(500), 1}}, next: ms(600), sched: 5, dropped: 2},
				{name: "back on schedule", at: ms(600), want: []wantTick{{4, ms(600), 1}}, next: ms(700), sched: 6, dropped: 2},
				{name: "same instant again", at: ms(600), next: ms(700), sched: 6, dropped: 2},
			},
		},
		{
			name: "FireOnce coalesces every due tick into one",
			spec: TimerSpec{Name: "t", Period: ms(100), Policy: FireOnce},
			steps: []fireStep{
				{name: "early", at: ms(99), next: ms(100)},
				{name: "on time", at: ms(100), want: []wantTick{{1, ms(100), 1}}, next: ms(200), sched: 1},
				{name: "late, but not past a tick", at: ms(250), want: []wantTick{{2, ms(200), 1}}, next: ms(300), sched: 2},
				{name: "late past two ticks", at: ms(570), want: []wantTick{{3, ms(300), 3}}, next: ms(600), sched: 5},
				{name: "back on schedule", at: ms(600), want: []wantTick{{4, ms(600), 1}}, next: ms(700), sched: 6},
			},
		},
		{
			name: "CatchUp delivers the missed ticks, the newest MaxCatchUp of them",
			spec: TimerSpec{Name: "t", Period: ms(100), Policy: CatchUp, MaxCatchUp: 2},
			steps: []fireStep{
				{name: "on time", at: ms(100), want: []wantTick{{1, ms(100), 1}}, next: ms(200), sched: 1},
				{name: "late, but not past a tick", at: ms(250), want: []wantTick{{2, ms(200), 1}}, next: ms(300), sched: 2},
				{name: "late past two ticks: the oldest is over the limit",
					at: ms(570), want: []wantTick{{3, ms(400), 1}, {4, ms(500), 1}}, next: ms(600), sched: 5, dropped: 1},
				{name: "back on schedule", at: ms(600), want: []wantTick{{5, ms(600), 1}}, next: ms(700), sched: 6, dropped: 1},
			},
		},
		{
			name: "CatchUp under its limit loses nothing",
			spec: TimerSpec{Name: "t", Period: ms(100), Policy: CatchUp, MaxCatchUp: 10},
			steps: []fireStep{
				{name: "on time", at: ms(100), want: []wantTick{{1, ms(100), 1}}, next: ms(200), sched: 1},
				{name: "late past three ticks",
					at: ms(570), want: []wantTick{{2, ms(200), 1}, {3, ms(300), 1}, {4, ms(400), 1}, {5, ms(500), 1}}, next: ms(600), sched: 5},
			},
		},
		{
			name: "FirstDue sets the first tick, then Period",
			spec: TimerSpec{Name: "t", Period: ms(100), Policy: Skip, FirstDue: ms(30)},
			steps: []fireStep{
				{name: "before the first", at: ms(29), next: ms(30)},
				{name: "first", at: ms(30), want: []wantTick{{1, ms(30), 1}}, next: ms(130), sched: 1},
				{name: "second", at: ms(131), want: []wantTick{{2, ms(130), 1}}, next: ms(230), sched: 2},
			},
		},
		{
			name: "sub-millisecond clock: a tick never fires before its millisecond",
			spec: TimerSpec{Name: "t", Period: ms(1), Policy: CatchUp, MaxCatchUp: 5},
			steps: []fireStep{
				{name: "just before", at: ms(1) - 1, next: ms(1)},
				{name: "inside the millisecond", at: ms(1) + 999_999, want: []wantTick{{1, ms(1), 1}}, next: ms(2), sched: 1},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.spec.Validate(); err != nil {
				t.Fatal(err)
			}
			tm := NewTimer(tc.spec, t0)
			for _, st := range tc.steps {
				got := tm.Fire(at(st.at))
				var want []Tick
				for _, w := range st.want {
					want = append(want, Tick{Name: tc.spec.Name, Index: w.index, Due: at(w.due), Coalesced: w.coalesced})
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s (t0+%s): ticks\n got %v\nwant %v", st.name, st.at, got, want)
				}
				if !tm.NextDue.Equal(at(st.next)) || tm.ScheduledIndex != st.sched || tm.Dropped != st.dropped {
					t.Fatalf("%s (t0+%s): next=t0+%s sched=%d dropped=%d, want next=t0+%s sched=%d dropped=%d",
						st.name, st.at, tm.NextDue.Sub(t0), tm.ScheduledIndex, tm.Dropped, st.next, st.sched, st.dropped)
				}
			}
		})
	}
}

func TestNewTimerRoundsUpToMillisecond(t *testing.T) {
	tm := NewTimer(TimerSpec{Name: "t", Period: ms(10), Policy: Skip}, t0.Add(5500*time.Microsecond))
	if want := at(ms(16)); !tm.NextDue.Equal(want) || tm.NextDue.Location() != time.UTC {
		t.Fatalf("NextDue = %v, want %v in UTC", tm.NextDue, want)
	}
}

func TestTimerSpecValidate(t *testing.T) {
	ok := TimerSpec{Name: "tick", Period: ms(1), Policy: Skip}
	tests := []struct {
		name string
		mod  func(*TimerSpec)
		bad  bool
	}{
		{"valid", func(*TimerSpec) {}, false},
		{"catch-up", func(s *TimerSpec) { s.Policy, s.MaxCatchUp = CatchUp, 3 }, false},
		{"name of 128 bytes", func(s *TimerSpec) { s.Name = strings.Repeat("a", MaxTimerNameLen) }, false},
		{"name with / : @ . - _", func(s *TimerSpec) { s.Name = "a/b:c@d.e-f_g" }, false},
		{"empty name", func(s *TimerSpec) { s.Name = "" }, true},
		{"name of 129 bytes", func(s *TimerSpec) { s.Name = strings.Repeat("a", MaxTimerNameLen+1) }, true},
		{"name with a space", func(s *TimerSpec) { s.Name = "a b" }, true},
		{"period under 1ms", func(s *TimerSpec) { s.Period = time.Millisecond - 1 }, true},
		{"period not whole ms", func(s *TimerSpec) { s.Period = 1500 * time.Microsecond }, true},
		{"period too long", func(s *TimerSpec) { s.Period = MaxTimerPeriod + time.Millisecond }, true},
		{"zero policy", func(s *TimerSpec) { s.Policy = 0 }, true},
		{"unknown policy", func(s *TimerSpec) { s.Policy = CatchUp + 1 }, true},
		{"catch-up without a limit", func(s *TimerSpec) { s.Policy = CatchUp }, true},
		{"catch-up over the limit", func(s *TimerSpec) { s.Policy, s.MaxCatchUp = CatchUp, MaxCatchUpLimit+1 }, true},
		{"MaxCatchUp with Skip", func(s *TimerSpec) { s.MaxCatchUp = 2 }, true},
		{"negative first due", func(s *TimerSpec) { s.FirstDue = -ms(1) }, true},
		{"first due not whole ms", func(s *TimerSpec) { s.FirstDue = time.Microsecond }, true},
	}
	for _, tc := range tests {
		s := ok
		tc.mod(&s)
		err := s.Validate()
		if tc.bad != (err != nil) || err != nil && !errors.Is(err, ErrInvalidTimer) {
			t.Errorf("%s: Validate() = %v, want error: %v (ErrInvalidTimer)", tc.name, err, tc.bad)
		}
	}
}

func TestOverrunPolicyString(t *testing.T) {
	for p, want := range map[OverrunPolicy]string{Skip: "Skip", FireOnce: "FireOnce", CatchUp: "CatchUp", 0: "OverrunPolicy(0)"} {
		if p.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(p), p.String(), want)
		}
		if p != 0 {
			if got, err := ParseOverrunPolicy(strings.ToLower(want)); err != nil || got != p {
				t.Errorf("ParseOverrunPolicy(%q) = %v, %v", strings.ToLower(want), got, err)
			}
		}
	}
	if _, err := ParseOverrunPolicy("sometimes"); !errors.Is(err, ErrInvalidTimer) {
		t.Errorf("ParseOverrunPolicy(sometimes) = %v", err)
	}
}

func TestTimersSetCancelNext(t *testing.T) {
	var ts Timers // the zero value is usable
	if _, ok := ts.Next(); ok || ts.Len() != 0 {
		t.Fatal("empty set has a next due")
	}
	must(t, ts.Set(TimerSpec{Name: "slow", Period: ms(300), Policy: Skip}, t0))
	must(t, ts.Set(TimerSpec{Name: "fast", Period: ms(100), Policy: CatchUp, MaxCatchUp: 10}, t0))
	if next, _ := ts.Next(); !next.Equal(at(ms(100))) {
		t.Fatalf("Next = t0+%s, want t0+100ms", next.Sub(t0))
	}
	// Due order across timers; equal due times by name.
	got := ts.FireDue(at(ms(300)))
	want := []string{"fast#1@100ms", "fast#2@200ms", "fast#3@300ms", "slow#1@300ms"}
	if s := tickStrings(got); !reflect.DeepEqual(s, want) {
		t.Fatalf("FireDue = %v, want %v", s, want)
	}

	// Replacing a timer keeps its counters; Cancel then Set starts over.
	must(t, ts.Set(TimerSpec{Name: "fast", Period: ms(50), Policy: Skip}, at(ms(300))))
	if s := tickStrings(ts.FireDue(at(ms(350)))); !reflect.DeepEqual(s, []string{"fast#4@350ms"}) {
		t.Fatalf("after replace: %v", s)
	}
	if !ts.Cancel("fast") || ts.Cancel("fast") || ts.Len() != 1 {
		t.Fatal("Cancel")
	}
	must(t, ts.Set(TimerSpec{Name: "fast", Period: ms(50), Policy: Skip}, at(ms(350))))
	if s := tickStrings(ts.FireDue(at(ms(400)))); !reflect.DeepEqual(s, []string{"fast#1@400ms"}) {
		t.Fatalf("after cancel and set: %v", s)
	}
	if _, ok := ts.Get("nope"); ok {
		t.Fatal("Get of a missing timer")
	}
	if err := ts.Set(TimerSpec{Name: "bad"}, t0); !errors.Is(err, ErrInvalidTimer) {
		t.Fatalf("Set(invalid) = %v", err)
	}
}

func TestTimersLimit(t *testing.T) {
	ts := NewTimers()
	for i := range MaxTimers {
		must(t, ts.Set(TimerSpec{Name: fmt.Sprintf("t%02d", i), Period: ms(10), Policy: Skip}, t0))
	}
	if err := ts.Set(TimerSpec{Name: "one-more", Period: ms(10), Policy: Skip}, t0); !errors.Is(err, ErrTooManyTimers) {
		t.Fatalf("Set over the limit = %v", err)
	}
	must(t, ts.Set(TimerSpec{Name: "t00", Period: ms(20), Policy: Skip}, t0)) // a replacement is fine
	if _, err := DecodeTimers(ts.Encode()); err != nil {
		t.Fatal(err)
	}
}

func TestTimersEncodeRoundTrip(t *testing.T) {
	ts := sampleTimers(t)
	b := ts.Encode()
	got, err := DecodeTimers(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ts) {
		t.Fatalf("decode(encode(x)) != x:\n got %+v\nwant %+v", got, ts)
	}
	if !bytes.Equal(got.Encode(), b) {
		t.Fatal("encoding is not deterministic")
	}
	empty, err := DecodeTimers(NewTimers().Encode())
	if err != nil || empty.Len() != 0 {
		t.Fatalf("empty: %v %v", empty, err)
	}
}

func TestDecodeTimersRejects(t *testing.T) {
	good := sampleTimers(t).Encode()
	swapped := func() []byte { // the same timers, names out of order
		a := NewTimers()
		must(t, a.Set(TimerSpec{Name: "a", Period: ms(10), Policy: Skip}, t0))
		b := NewTimers()
		must(t, b.Set(TimerSpec{Name: "b", Period: ms(10), Policy: Skip}, t0))
		ea, eb := a.Encode(), b.Encode()
		out := []byte{timersMagic, timersVersion, 2}
		out = append(out, eb[3:]...)
		return append(out, ea[3:]...)
	}()
	tests := map[string][]byte{
		"empty":          nil,
		"other magic":    {'R', 1, 0},
		"other version":  {timersMagic, 2, 0},
		"truncated":      good[:len(good)-1],
		"trailing bytes": append(bytes.Clone(good), 0),
		"too many":       {timersMagic, timersVersion, MaxTimers + 1},
		"names unsorted": swapped,
		"overlong count": {timersMagic, timersVersion, 0x80, 0x00},
	}
	for name, b := range tests {
		if _, err := DecodeTimers(b); !errors.Is(err, ErrCorruptState) {
			t.Errorf("%s: DecodeTimers = %v, want ErrCorruptState", name, err)
		}
	}
}

// Property: for random sequences of fires (increasing now, random gaps,
// pauses, and moves to a "new node" through Encode → Decode), indices grow by
// exactly one per delivered tick, every tick that came due is accounted for,
// and with CatchUp under its limit the delivered ticks are exactly 1..N with
// N the number of periods elapsed.
func TestTimerPropertyNoTickLostOrDoubled(t *testing.T) {
	for seed := range 500 {
		rng := rand.New(rand.NewPCG(uint64(seed), 42))
		period := time.Duration(1+rng.IntN(250)) * time.Millisecond
		policy := []OverrunPolicy{Skip, FireOnce, CatchUp}[seed%3]
		spec := TimerSpec{Name: "p", Period: period, Policy: policy}
		if policy == CatchUp {
			spec.MaxCatchUp = MaxCatchUpLimit
		}
		start := at(time.Duration(rng.IntN(10_000)) * time.Millisecond)
		ts := NewTimers()
		must(t, ts.Set(spec, start))

		now := start
		var last uint64
		var lastDue time.Time
		var coalesced uint64
		moves := 0
		for range 1 + rng.IntN(80) {
			switch r := rng.IntN(20); {
			case r == 0: // a long pause, e.g. a slow relocation
				now = now.Add(time.Duration(rng.Int64N(int64(100 * period))))
			case r < 4: // a move: the state leaves this node and resumes on another
				b := ts.Encode()
				next, err := DecodeTimers(b)
				if err != nil {
					t.Fatalf("seed %d: decode after move: %v", seed, err)
				}
				if !reflect.DeepEqual(next, ts) {
					t.Fatalf("seed %d: the timers changed in the move", seed)
				}
				ts = next
				moves++
			default:
				now = now.Add(time.Duration(rng.Int64N(int64(2 * period))))
			}
			for _, tk := range ts.FireDue(now) {
				if tk.Index != last+1 {
					t.Fatalf("seed %d (%s): index %d after %d", seed, policy, tk.Index, last)
				}
				if tk.Due.After(now) || !tk.Due.After(lastDue) {
					t.Fatalf("seed %d (%s): tick due %v at now %v after one due %v", seed, policy, tk.Due, now, lastDue)
				}
				if policy == CatchUp && !tk.Due.Equal(start.Add(time.Duration(tk.Index)*period)) {
					t.Fatalf("seed %d: tick %d due at start+%s, want start+%s", seed, tk.Index, tk.Due.Sub(start), time.Duration(tk.Index)*period)
				}
				last, lastDue = tk.Index, tk.Due
				coalesced += tk.Coalesced
			}
		}
		elapsed := uint64(now.Sub(start) / period)
		tm, _ := ts.Get("p")
		if tm.ScheduledIndex != elapsed || tm.DeliveryIndex != last {
			t.Fatalf("seed %d (%s): scheduled %d delivered %d, want %d periods elapsed and %d delivered",
				seed, policy, tm.ScheduledIndex, tm.DeliveryIndex, elapsed, last)
		}
		if !tm.NextDue.After(now) || tm.NextDue.Add(-period).After(now) {
			t.Fatalf("seed %d: NextDue %v is not the first tick after now %v", seed, tm.NextDue, now)
		}
		switch policy {
		case CatchUp:
			if last != elapsed || tm.Dropped != 0 {
				t.Fatalf("seed %d: CatchUp delivered 1..%d (dropped %d), want 1..%d", seed, last, tm.Dropped, elapsed)
			}
		case Skip:
			if last+tm.Dropped != elapsed {
				t.Fatalf("seed %d: Skip delivered %d + dropped %d, want %d", seed, last, tm.Dropped, elapsed)
			}
		case FireOnce:
			if coalesced != elapsed || tm.Dropped != 0 {
				t.Fatalf("seed %d: FireOnce covered %d ticks (dropped %d), want %d", seed, coalesced, tm.Dropped, elapsed)
			}
		}
	}
}

func FuzzDecodeTimers(f *testing.F) {
	f.Add(NewTimers().Encode())
	f.Add(sampleTimers(f).Encode())
	f.Add([]byte{timersMagic, timersVersion, 1, 1, 'x', 10, byte(CatchUp), 3, 0, 0, 0, 0, 0})
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, err := DecodeTimers(b)
		if err != nil {
			if !errors.Is(err, ErrCorruptState) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		e := ts.Encode()
		if !bytes.Equal(e, b) {
			t.Fatalf("encode(decode(b)) != b:\n%x\n%x", e, b)
		}
		again, err := DecodeTimers(e)
		if err != nil || !reflect.DeepEqual(again, ts) {
			t.Fatalf("decode(encode(x)) != x: %v", err)
		}
		// A decoded timer can fire without panicking.
		for _, name := range ts.Names() {
			tm, _ := ts.Get(name)
			tm.Fire(tm.NextDue.Add(3 * tm.Spec.Period))
		}
	})
}

func sampleTimers(t testing.TB) *Timers {
	t.Helper()
	ts := NewTimers()
	must(t, ts.Set(TimerSpec{Name: "tick", Period: ms(100), Policy: CatchUp, MaxCatchUp: 4}, t0))
	must(t, ts.Set(TimerSpec{Name: "flush", Period: ms(1000), Policy: FireOnce, FirstDue: ms(5)}, t0))
	must(t, ts.Set(TimerSpec{Name: "gc/sweep", Period: ms(250), Policy: Skip}, t0))
	ts.FireDue(at(ms(1234)))
	return ts
}

func tickStrings(ticks []Tick) []string {
	var out []string
	for _, tk := range ticks {
		out = append(out, fmt.Sprintf("%s#%d@%s", tk.Name, tk.Index, tk.Due.Sub(t0)))
	}
	return out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
