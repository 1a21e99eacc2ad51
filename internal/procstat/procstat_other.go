//go:build !linux

package procstat

import (
	"errors"
	"time"
)

var errNoProc = errors.New("procstat: a process's CPU and RSS are read from /proc (Linux only)")

// CPU is an error off Linux.
func CPU(int) (time.Duration, error) { return 0, errNoProc }

// RSS is an error off Linux.
func RSS(int) (int64, error) { return 0, errNoProc }
