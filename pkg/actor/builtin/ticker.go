package builtin

import (
	"errors"
	"strconv"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
)

// TickerTimer is the name of the ticker's timer.
const TickerTimer = "tick"

// DefaultTickerCatchUp is the catch-up limit when start names none.
const DefaultTickerCatchUp = 1024

// ticker counts the ticks of its timer and checks that their delivery
// indices go 1, 2, 3, … with no gap or repeat, across relocations: the test
// object for timers.
//
//	start PERIOD_MS [skip|fireonce|catchup] [MAXCATCHUP]   → {"count":0,"last":0,"ok":true}
//	read                                                   → {"count":n,"last":i,"ok":bool}
//	stop                                                   → {"count":n,"last":i,"ok":bool}
//
// start (re)starts the timer "tick" (default policy catchup, limit
// DefaultTickerCatchUp) and resets the counts; stop cancels it. ok is false
// once a tick arrived whose index was not the last one + 1.
type ticker struct {
	s tickerState
}

type tickerState struct {
	V          int    `json:"v"`
	Running    bool   `json:"running"`
	PeriodMs   int64  `json:"period_ms"`
	Policy     string `json:"policy"`
	MaxCatchUp int    `json:"max_catch_up"`
	Count      uint64 `json:"count"`
	Last       uint64 `json:"last"`
	GapOrRep   bool   `json:"gap_or_repeat"`
}

type tickerRead struct {
	Count uint64 `json:"count"`
	Last  uint64 `json:"last"`
	OK    bool   `json:"ok"`
}

// Handle implements actor.Object.
func (t *ticker) Handle(ctx actor.Context, method string, args [][]byte) ([]byte, error) {
	switch method {
	case "start":
		spec, err := tickerSpec(args)
		if err != nil {
			return nil, err
		}
		// Cancel first, so the new timer's indices start again at 1.
		ctx.CancelTimer(TickerTimer)
		if err := ctx.SetTimer(spec); err != nil {
			if errors.Is(err, actor.ErrInvalidTimer) {
				return nil, actor.InvalidArgument("%v", err)
			}
			return nil, err
		}
		t.s = tickerState{Running: true, PeriodMs: spec.Period.Milliseconds(), Policy: spec.Policy.String(), MaxCatchUp: spec.MaxCatchUp}
		return t.read()
	case "read":
		if err := wantArgs(TickerType, method, args); err != nil {
			return nil, err
		}
		return t.read()
	case "stop":
		if err := wantArgs(TickerType, method, args); err != nil {
			return nil, err
		}
		ctx.CancelTimer(TickerTimer)
		t.s.Running = false
		return t.read()
	}
	return nil, actor.UnknownMethod(TickerType, method)
}

func tickerSpec(args [][]byte) (actor.TimerSpec, error) {
	if len(args) < 1 || len(args) > 3 {
		return actor.TimerSpec{}, actor.InvalidArgument("ticker start takes PERIOD_MS [POLICY] [MAXCATCHUP], got %d argument(s)", len(args))
	}
	p, err := strconv.ParseInt(string(args[0]), 10, 64)
	if err != nil || p < 1 || p > actor.MaxTimerPeriod.Milliseconds() {
		return actor.TimerSpec{}, actor.InvalidArgument("PERIOD_MS %q is not a decimal from 1 to %d", args[0], actor.MaxTimerPeriod.Milliseconds())
	}
	spec := actor.TimerSpec{Name: TickerTimer, Period: time.Duration(p) * time.Millisecond, Policy: actor.CatchUp}
	if len(args) >= 2 {
		if spec.Policy, err = actor.ParseOverrunPolicy(string(args[1])); err != nil {
			return actor.TimerSpec{}, actor.InvalidArgument("%v", err)
		}
	}
	if spec.Policy == actor.CatchUp {
		spec.MaxCatchUp = DefaultTickerCatchUp
	}
	if len(args) == 3 {
		if spec.Policy != actor.CatchUp {
			return actor.TimerSpec{}, actor.InvalidArgument("MAXCATCHUP is only for the catchup policy")
		}
		n, err := strconv.Atoi(string(args[2]))
		if err != nil || n < 1 || n > actor.MaxCatchUpLimit {
			return actor.TimerSpec{}, actor.InvalidArgument("MAXCATCHUP %q is not a decimal from 1 to %d", args[2], actor.MaxCatchUpLimit)
		}
		spec.MaxCatchUp = n
	}
	if err := spec.Validate(); err != nil {
		return actor.TimerSpec{}, actor.InvalidArgument("%v", err)
	}
	return spec, nil
}

func (t *ticker) read() ([]byte, error) {
	return reply(tickerRead{Count: t.s.Count, Last: t.s.Last, OK: !t.s.GapOrRep})
}

// OnTimer implements actor.TimerObject.
func (t *ticker) OnTimer(_ actor.Context, tick actor.Tick) error {
	if tick.Name != TickerTimer {
		return nil
	}
	if tick.Index != t.s.Last+1 {
		t.s.GapOrRep = true
	}
	t.s.Count++
	t.s.Last = tick.Index
	return nil
}

// Snapshot implements actor.Object.
func (t *ticker) Snapshot() ([]byte, error) {
	s := t.s
	s.V = stateVersion
	return snapshot(s)
}

// Restore implements actor.Object.
func (t *ticker) Restore(b []byte) error {
	var s tickerState
	if err := restore(TickerType, b, &s, &s.V); err != nil {
		return err
	}
	if s.Policy != "" {
		if _, err := actor.ParseOverrunPolicy(s.Policy); err != nil {
			return corrupt(TickerType, "%v", err)
		}
	}
	if s.PeriodMs < 0 || s.MaxCatchUp < 0 || s.MaxCatchUp > actor.MaxCatchUpLimit {
		return corrupt(TickerType, "period %d ms, max catch-up %d", s.PeriodMs, s.MaxCatchUp)
	}
	t.s = s
	return nil
}
