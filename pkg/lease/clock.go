package lease

import "time"

// Clock is the keeper's time source: the send time of every keep-alive, the
// local deadline, and the timers of the loop. The times it returns must carry a
// monotonic reading (time.Now does) so that a wall-clock step never moves the
// deadline. I/O timeouts (Config.RequestTimeout) are plain context deadlines on
// real time: they bound a call, they never decide validity.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the keeper uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// RealClock is the Clock of the process (time.Now, time.NewTimer).
func RealClock() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }
