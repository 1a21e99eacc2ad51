//go:build !linux

package bench

import (
	"errors"
	"time"
)

var errNoProc = errors.New("bench: a process's CPU and RSS are read from /proc (Linux only)")

func procCPU(int) (time.Duration, error) { return 0, errNoProc }
func procRSS(int) (int64, error)         { return 0, errNoProc }
