package procstat_test

import (
	"crypto/sha256"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/procstat"
)

// This process's own CPU time and resident set are read and plausible.
func TestSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	var cpu time.Duration
	var err1 error
	var sum [32]byte
	for deadline := time.Now().Add(10 * time.Second); cpu == 0 && err1 == nil && time.Now().Before(deadline); {
		for range 10000 { // some CPU time to count (in 10 ms ticks)
			sum = sha256.Sum256(sum[:])
		}
		cpu, err1 = procstat.CPU(os.Getpid())
	}
	rss, err2 := procstat.RSS(os.Getpid())
	if err1 != nil || err2 != nil || cpu <= 0 || rss < 1<<20 {
		t.Fatalf("cpu %v (%v), rss %d (%v)", cpu, err1, rss, err2)
	}
}
