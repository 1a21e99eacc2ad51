//go:build unix

package procstat

import (
	"syscall"
	"time"
)

// ProcessCPU is the CPU time (user and system) this process used so far:
// etcd, the nodes and the clients together.
func ProcessCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
