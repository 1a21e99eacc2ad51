//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// plant is the switch of one bug.
type plant struct {
	count  atomic.Int32 // how many plantings (MESHLOC_PLANT, Plant) are in force
	logged atomic.Bool  // "planted: <bug>" was written
}

var (
	plants = func() map[string]*plant {
		m := make(map[string]*plant, len(Bugs))
		for _, b := range Bugs {
			m[b] = &plant{}
		}
		return m
	}()
	anyPlanted atomic.Int32 // sum of every count: the fast path of Planted
)

func init() {
	if spec := os.Getenv("MESHLOC_PLANT"); spec != "" {
		plantAll(strings.Split(spec, ","), "MESHLOC_PLANT")
	}
}

// plantAll plants the known names of bugs and returns those it planted;
// unknown names are reported on stderr and ignored.
func plantAll(bugs []string, from string) []*plant {
	var done []*plant
	for _, b := range bugs {
		b = strings.TrimSpace(b)
		if b == "" {
			continue
		}
		p, ok := plants[b]
		if !ok {
			fmt.Fprintf(os.Stderr, "planted: %s: ignoring unknown bug %q (known: %s)\n", from, b, strings.Join(Bugs, ", "))
			continue
		}
		p.count.Add(1)
		anyPlanted.Add(1)
		done = append(done, p)
	}
	return done
}

// Planted reports whether bug is planted. Ask it only where the correct code
// would act and the planted one does not: the first true answer for a bug
// logs "planted: <bug>" on stderr.
func Planted(bug string) bool {
	if anyPlanted.Load() == 0 {
		return false
	}
	p := plants[bug]
	if p == nil || p.count.Load() == 0 {
		return false
	}
	if p.logged.CompareAndSwap(false, true) {
		fmt.Fprintf(os.Stderr, "planted: %s\n", bug)
	}
	return true
}

// Plant plants bugs in this process until undo is called (undo is
// idempotent). Unknown names are reported on stderr and ignored. Plantings
// nest: a bug stays planted while any planting of it is in force.
func Plant(bugs ...string) (undo func()) {
	done := plantAll(bugs, "Plant")
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, p := range done {
				p.count.Add(-1)
				anyPlanted.Add(-1)
			}
		})
	}
}
