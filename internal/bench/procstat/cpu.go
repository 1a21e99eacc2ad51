package procstat

import (
	"fmt"
	"time"
)

// CPUMeter adds up the process CPU time and the wall time of the rate
// windows it wraps.
type CPUMeter struct {
	cpu, wall time.Duration
	ok        bool
}

// Wrap is f, its process CPU and wall time added to m.
func (m *CPUMeter) Wrap(f func(time.Duration) (int64, int64, time.Duration, error)) func(time.Duration) (int64, int64, time.Duration, error) {
	return func(d time.Duration) (int64, int64, time.Duration, error) {
		c0, ok0 := ProcessCPU()
		ok, failed, el, err := f(d)
		c1, ok1 := ProcessCPU()
		m.ok = ok0 && ok1
		m.cpu += c1 - c0
		m.wall += el
		return ok, failed, el, err
	}
}

// Per is the CPU time per one of n operations (false: not measured).
func (m *CPUMeter) Per(n int64) (time.Duration, bool) {
	if !m.ok || n <= 0 {
		return 0, false
	}
	return m.cpu / time.Duration(n), true
}

// Note says how busy the processors were.
func (m *CPUMeter) Note() string {
	if m.wall <= 0 {
		return ""
	}
	return fmt.Sprintf("%.2f cores busy", m.cpu.Seconds()/m.wall.Seconds())
}
