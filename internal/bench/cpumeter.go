package bench

import (
	"fmt"
	"time"
)

// cpuMeter adds up the process CPU time and the wall time of the rate
// windows it wraps.
type cpuMeter struct {
	cpu, wall time.Duration
	ok        bool
}

func (m *cpuMeter) wrap(f func(time.Duration) (int64, int64, time.Duration, error)) func(time.Duration) (int64, int64, time.Duration, error) {
	return func(d time.Duration) (int64, int64, time.Duration, error) {
		c0, ok0 := processCPU()
		ok, failed, el, err := f(d)
		c1, ok1 := processCPU()
		m.ok = ok0 && ok1
		m.cpu += c1 - c0
		m.wall += el
		return ok, failed, el, err
	}
}

// per is the CPU time per one of n operations (false: not measured).
func (m *cpuMeter) per(n int64) (time.Duration, bool) {
	if !m.ok || n <= 0 {
		return 0, false
	}
	return m.cpu / time.Duration(n), true
}

// note says how busy the processors were.
func (m *cpuMeter) note() string {
	if m.wall <= 0 {
		return ""
	}
	return fmt.Sprintf("%.2f cores busy", m.cpu.Seconds()/m.wall.Seconds())
}
