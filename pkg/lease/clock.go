package lease

import "github.com/meshloc/meshloc/pkg/clock"

// Clock is the keeper's time source (pkg/clock: the process's one clock):
// the send time of every keep-alive, the local deadline, and the timers of
// the loop. I/O timeouts (Config.RequestTimeout) are plain context
// deadlines on real time: they bound a call, they never decide validity.
type Clock = clock.Clock

// Timer is the part of *time.Timer the keeper uses.
type Timer = clock.Timer

// RealClock is the Clock of the process.
func RealClock() Clock { return clock.Real() }
