// Package remindcheck checks durable reminders against the nodes'
// execution logs (pkg/node/execlog): every due time of every reminder ran
// at most once, whatever operation id its firings carried (two ids for one
// due time is a retry that the de-duplication table could not absorb), and
// every one-shot reminder a workload set and expects ran.
package remindcheck

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/meshloc/meshloc/pkg/node/execlog"
)

// Firing is one due time of one reminder as a log names it.
type Firing struct {
	Object string
	Name   string
	Seq    uint64
	DueMs  int64
}

// parse reads a log's "<name>@<seq>@<due ms>" (names hold no "@"… but
// may: the seq and due are the last two fields).
func parse(object, label string) (Firing, bool) {
	i := strings.LastIndexByte(label, '@')
	if i < 0 {
		return Firing{}, false
	}
	j := strings.LastIndexByte(label[:i], '@')
	if j < 0 {
		return Firing{}, false
	}
	seq, err1 := strconv.ParseUint(label[j+1:i], 10, 64)
	due, err2 := strconv.ParseInt(label[i+1:], 10, 64)
	return Firing{Object: object, Name: label[:j], Seq: seq, DueMs: due}, err1 == nil && err2 == nil
}

// Result is what the logs show.
type Result struct {
	// Firings: executions of reminder firings; Twice: executions of a due
	// time after its first (each a violation); Missing: expected one-shot
	// due times that never ran.
	Firings, Twice, Missing int
	// Violations: every due time that ran twice; NotRun: every expected
	// one that never ran (Expect).
	Violations, NotRun []string
	// ran counts executions by firing.
	ran map[Firing]int
}

// Check counts the firings in logs (by owner) and flags every due time
// that ran more than once.
func Check(logs map[string][]execlog.Entry) Result {
	r := Result{ran: map[Firing]int{}}
	where := map[Firing][]string{}
	for owner, es := range logs {
		for _, e := range es {
			for op, label := range e.Reminders {
				f, ok := parse(e.Object, label)
				if !ok {
					r.Violations = append(r.Violations, fmt.Sprintf("%s: unreadable reminder firing %q (operation %s)", e.Object, label, op))
					continue
				}
				r.Firings++
				r.ran[f]++
				where[f] = append(where[f], fmt.Sprintf("%s as %s under o%d/a%d", owner, op, e.ObjectGeneration, e.AuthorityGeneration))
			}
		}
	}
	for f, n := range r.ran {
		if n > 1 {
			r.Twice += n - 1
			sort.Strings(where[f])
			r.Violations = append(r.Violations, fmt.Sprintf("%s: reminder %q (seq %d) due at %d ran %d times: %s",
				f.Object, f.Name, f.Seq, f.DueMs, n, strings.Join(where[f], "; ")))
		}
	}
	sort.Strings(r.Violations)
	return r
}

// Expect flags a one-shot reminder name of object due at dueMs that set
// was acknowledged for and that never ran (any seq: the workload does not
// know it).
func (r *Result) Expect(object, name string, dueMs int64) {
	for f := range r.ran {
		if f.Object == object && f.Name == name && f.DueMs == dueMs {
			return
		}
	}
	r.Missing++
	r.NotRun = append(r.NotRun, fmt.Sprintf("%s: reminder %q due at %d was set and never ran", object, name, dueMs))
}
