//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Enabled reports whether failpoints are compiled in.
const Enabled = true

type point struct {
	action string
	arg    time.Duration
	at     int64 // fire only at this hit (0: see every)
	every  int64 // fire at every every-th hit (0: every hit)
	hits   atomic.Int64
}

var (
	mu     sync.RWMutex
	points = map[string]*point{}
	any    atomic.Bool
)

func init() {
	if spec := os.Getenv("MESHLOC_FAILPOINTS"); spec != "" {
		for _, kv := range strings.Split(spec, ";") {
			name, action, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok {
				fmt.Fprintf(os.Stderr, "failpoint: ignoring %q (want name=action)\n", kv)
				continue
			}
			if err := Enable(name, action); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}
	}
}

// Enable arms a point with an action (see the package doc).
func Enable(name, action string) error {
	p := &point{}
	if a, n, ok := strings.Cut(action, "@"); ok {
		at, err := strconv.ParseInt(n, 10, 64)
		if err != nil || at < 1 {
			return fmt.Errorf("failpoint: %s: bad hit number %q", name, n)
		}
		p.at, action = at, a
	} else if a, n, ok := strings.Cut(action, "%"); ok {
		every, err := strconv.ParseInt(n, 10, 64)
		if err != nil || every < 1 {
			return fmt.Errorf("failpoint: %s: bad hit period %q", name, n)
		}
		p.every, action = every, a
	}
	switch {
	case action == "error", action == "crash", action == "pause", action == "corrupt":
	case strings.HasPrefix(action, "sleep:"):
		d, err := time.ParseDuration(strings.TrimPrefix(action, "sleep:"))
		if err != nil {
			return fmt.Errorf("failpoint: %s: %v", name, err)
		}
		p.arg, action = d, "sleep"
	default:
		return fmt.Errorf("failpoint: %s: unknown action %q", name, action)
	}
	p.action = action
	mu.Lock()
	points[name] = p
	any.Store(true)
	mu.Unlock()
	return nil
}

// Reset disarms every point.
func Reset() {
	mu.Lock()
	points = map[string]*point{}
	any.Store(false)
	mu.Unlock()
}

func fire(name string) *point {
	if !any.Load() {
		return nil
	}
	mu.RLock()
	p := points[name]
	mu.RUnlock()
	if p == nil {
		return nil
	}
	h := p.hits.Add(1)
	if p.at != 0 && h != p.at || p.every != 0 && h%p.every != 0 {
		return nil
	}
	fmt.Fprintf(os.Stderr, "failpoint: %s %s\n", name, p.action)
	return p
}

// Hit runs the action armed at name, if any.
func Hit(name string) error {
	p := fire(name)
	if p == nil {
		return nil
	}
	switch p.action {
	case "error":
		return fmt.Errorf("%w at %s", ErrInjected, name)
	case "crash":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case "pause":
		select {}
	case "sleep":
		time.Sleep(p.arg)
	}
	return nil
}

// Corrupt flips the lowest bit of one byte of a copy of data if name is
// armed with "corrupt": of the last ASCII digit, or of the middle byte when
// data has none. A digit stays a digit, so a payload usually still decodes
// and only a checksum can catch the change; and the last digit of a
// relocation payload is in its state (the envelope with the de-duplication
// table comes first): the last value of the object, e.g. a list's last
// element c1-39 becomes c1-38. Other actions run as in Hit.
func Corrupt(name string, data []byte) []byte {
	p := fire(name)
	if p == nil || len(data) == 0 {
		return data
	}
	if p.action != "corrupt" {
		return data
	}
	c := append([]byte(nil), data...)
	i := len(c) / 2
	for j := len(c) - 1; j >= 0; j-- {
		if c[j] >= '0' && c[j] <= '9' {
			i = j
			break
		}
	}
	c[i] ^= 0x01
	return c
}
