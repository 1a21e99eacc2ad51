// Package clock is the one injected time source of a meshloc process: the
// node, its relocation driver and its lease keeper read the time and make
// timers through it, never through package time directly, so tests can run
// them on virtual time (testing/synctest) or hold time still. Times carry a
// monotonic reading (Real's do), so a wall-clock step never moves a
// deadline.
package clock

import "time"

// Clock is a time source.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
	NewTicker(d time.Duration) Ticker
	// AfterFunc calls f in its own goroutine after d; Stop cancels it.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is the part of *time.Timer meshloc uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Ticker is the part of *time.Ticker meshloc uses.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the process's clock (package time).
func Real() Clock { return real{} }

type real struct{}

func (real) Now() time.Time                   { return time.Now() }
func (real) NewTimer(d time.Duration) Timer   { return realTimer{time.NewTimer(d)} }
func (real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }
func (real) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{time.AfterFunc(d, f)}
}

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }

// Sleep waits d on c, or until done is closed; it reports whether d passed.
func Sleep(c Clock, d time.Duration, done <-chan struct{}) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-done:
		return false
	}
}
