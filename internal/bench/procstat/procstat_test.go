package procstat

import (
	"testing"
	"time"
)

// A reading against an earlier one gives the four measures, named with
// the suffix.
func TestSchedSince(t *testing.T) {
	s0 := ReadSched()
	ms := ReadSched().Since(s0, ", x")
	if len(ms) < 2 || ms[1].Name != "run-queue wait p99, calls, x" {
		t.Fatalf("%+v", ms)
	}
}

// A wrapped window adds its process CPU and wall time; per divides by the
// operations.
func TestCPUMeter(t *testing.T) {
	var m CPUMeter
	w := m.Wrap(func(d time.Duration) (int64, int64, time.Duration, error) {
		x := 0
		for i := range 1 << 22 {
			x += i
		}
		_ = x
		return 10, 0, time.Millisecond, nil
	})
	if _, _, _, err := w(time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, ok := ProcessCPU(); !ok {
		t.Skip("no process CPU time on this system")
	}
	if c, ok := m.Per(10); !ok || c < 0 || m.wall != time.Millisecond {
		t.Fatalf("per %v %v, wall %v", c, ok, m.wall)
	}
	if _, ok := m.Per(0); ok {
		t.Fatal("CPU per none of the operations")
	}
}
