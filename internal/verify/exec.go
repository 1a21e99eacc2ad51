package verify

import (
	"context"
	"fmt"
	"sort"

	"github.com/meshloc/meshloc/internal/verify/remindcheck"
	"github.com/meshloc/meshloc/internal/verify/statecheck"
	"github.com/meshloc/meshloc/pkg/node/execlog"
)

// The lines of an execution log and their aggregate per owner and fence
// are pkg/node/execlog's (it writes them and reads them back).
type (
	ExecEntry    = execlog.Entry
	ExecLine     = execlog.Line
	ExecLogStats = execlog.Stats
)

// ExecLogSource gives the nodes' execution logs after a run. The key of the
// map is the owner that executed: "id@generation" (a restarted node is
// another owner).
type ExecLogSource interface {
	ExecLogs(ctx context.Context) (map[string][]ExecEntry, error)
}

// ExecCheck is the result of the execution-log cross-check.
type ExecCheck struct {
	Nodes   int `json:"nodes"`
	Entries int `json:"entries"`
	// TwoOwnerWindows: fences under which two owners executed, or an owner
	// that etcd did not grant the fence to.
	TwoOwnerWindows int `json:"twoOwnerWindows"`
	// Operations: distinct operation ids executed.
	Operations int `json:"operations"`
	// DoubleExecutions: executions of an operation id after its first
	// (anywhere: another owner, another fence, or the same one again),
	// except those counted in ReexecutedAfterLoss.
	DoubleExecutions int `json:"doubleExecutions"`
	// ReexecutedAfterLoss: executions of an operation id again on an object
	// re-created with a larger object generation, after the audit saw the
	// generation of the earlier execution superseded by a recovery: that
	// state and its de-duplication table died with their owner and the
	// loss was declared (StateLost), so the retry ran on the new state.
	ReexecutedAfterLoss int `json:"reexecutedAfterLoss"`
	// Reads: executions of durable objects' requests that changed nothing
	// (execlog ReadOnly), left out of DoubleExecutions: their replies are
	// not persisted, so a retry across a sleep or a crash runs them again.
	Reads int `json:"reads,omitempty"`
	// StateClaims and StateWrites: the durable state store's claims and
	// writes audited (internal/verify/statecheck).
	StateClaims int `json:"stateClaims,omitempty"`
	StateWrites int `json:"stateWrites,omitempty"`
	// ReminderFirings: reminder due times executed; RemindersTwice: their
	// executions after the first (internal/verify/remindcheck).
	ReminderFirings int         `json:"reminderFirings,omitempty"`
	RemindersTwice  int         `json:"remindersTwice,omitempty"`
	Violations      []Violation `json:"violations,omitempty"`
}

// CheckExecLogs checks that for every (object, object generation, authority
// generation) exactly one owner executed requests, the one etcd's record
// named for that fence (when the audit is given), and that no operation id
// was executed twice.
//
// Executed twice: two executions of one operation id under one object
// generation (by any owners, under any authority generations: the
// de-duplication table travels with the state), on two objects, or the same
// place twice. The one legitimate re-execution: an operation that ran under
// object generation g whose owner then died, retried with the same id on
// the object re-created with g' > g; it is counted in ReexecutedAfterLoss
// when the audit shows generation g superseded by a recovery (at a
// generation <= g'), and as a double execution without such an audit.
func CheckExecLogs(logs map[string][]ExecEntry, audit *AuditResult) ExecCheck {
	var c ExecCheck
	c.Nodes = len(logs)
	nodes := make([]string, 0, len(logs))
	for n := range logs {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	by := map[FenceKey][]string{}
	type execution struct {
		owner string
		k     FenceKey
	}
	runs := map[string][]execution{}
	for _, n := range nodes {
		for _, e := range logs[n] {
			c.Entries++
			k := FenceKey{Object: e.Object, ObjectGeneration: e.ObjectGeneration, AuthorityGeneration: e.AuthorityGeneration}
			if l := by[k]; len(l) == 0 || l[len(l)-1] != n {
				by[k] = append(by[k], n)
			}
			for _, op := range e.OperationIDs {
				if e.Reads[op] {
					c.Reads++ // changed nothing: may run again after a sleep or a crash
					continue
				}
				runs[op] = append(runs[op], execution{owner: n, k: k})
			}
		}
	}
	c.Operations = len(runs)
	sc := statecheck.Check(logs)
	c.StateClaims, c.StateWrites = sc.Claims, sc.Writes
	for _, v := range sc.Violations {
		c.Violations = append(c.Violations, Violation{Check: "state-" + v.Check, Object: v.Object, Detail: v.Detail})
	}
	rc := remindcheck.Check(logs)
	c.ReminderFirings, c.RemindersTwice = rc.Firings, rc.Twice
	for _, v := range rc.Violations {
		c.Violations = append(c.Violations, Violation{Check: "reminder-fired-twice", Detail: v})
	}
	ops := make([]string, 0, len(runs))
	for op, rs := range runs {
		if len(rs) > 1 {
			ops = append(ops, op)
		}
	}
	sort.Strings(ops)
	for _, op := range ops {
		rs := runs[op]
		sort.SliceStable(rs, func(i, j int) bool {
			a, b := rs[i].k, rs[j].k
			if a.Object != b.Object {
				return a.Object < b.Object
			}
			if a.ObjectGeneration != b.ObjectGeneration {
				return a.ObjectGeneration < b.ObjectGeneration
			}
			return a.AuthorityGeneration < b.AuthorityGeneration
		})
		for i := 1; i < len(rs); i++ {
			p, q := rs[i-1], rs[i]
			if p.k.Object == q.k.Object && q.k.ObjectGeneration > p.k.ObjectGeneration {
				if _, ok := audit.Superseded(p.k.Object, p.k.ObjectGeneration, q.k.ObjectGeneration); ok {
					c.ReexecutedAfterLoss++
					continue
				}
			}
			why := ""
			switch {
			case p.k.Object != q.k.Object:
				why = " (two objects)"
			case p.k.ObjectGeneration == q.k.ObjectGeneration:
				why = " (one object generation: its de-duplication table should have answered)"
			case audit == nil:
				why = fmt.Sprintf(" (no audit shows object generation %d lost)", p.k.ObjectGeneration)
			default:
				why = fmt.Sprintf(" (the audit shows no recovery from object generation %d)", p.k.ObjectGeneration)
			}
			c.DoubleExecutions++
			c.Violations = append(c.Violations, Violation{Check: "executed-twice", Object: q.k.Object,
				Detail: fmt.Sprintf("operation %s executed by %s under %v and by %s under %v%s", op, p.owner, p.k, q.owner, q.k, why)})
		}
	}
	keys := make([]FenceKey, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		ns := by[k]
		if len(ns) > 1 {
			c.TwoOwnerWindows++
			c.Violations = append(c.Violations, Violation{Check: "two-owners", Object: k.Object,
				Detail: fmt.Sprintf("under o%d/a%d requests were executed by %v", k.ObjectGeneration, k.AuthorityGeneration, ns)})
			continue
		}
		if audit == nil {
			continue
		}
		g, ok := audit.Fences[k]
		switch {
		case !ok && audit.Complete():
			c.Violations = append(c.Violations, Violation{Check: "fence-not-granted", Object: k.Object,
				Detail: fmt.Sprintf("%s executed under o%d/a%d, which etcd never held", ns[0], k.ObjectGeneration, k.AuthorityGeneration)})
		case ok && g.Owner.String() != ns[0]:
			c.TwoOwnerWindows++
			c.Violations = append(c.Violations, Violation{Check: "two-owners", Object: k.Object,
				Detail: fmt.Sprintf("%s executed under o%d/a%d, which etcd granted to %s (revision %d)", ns[0], k.ObjectGeneration, k.AuthorityGeneration, g.Owner, g.Revision)})
		}
	}
	return c
}

// ExecLogFiles is an ExecLogSource over the nodes' --exec-log files.
type ExecLogFiles []string

// ExecLogs reads the files (execlog.ReadFiles).
func (f ExecLogFiles) ExecLogs(ctx context.Context) (map[string][]ExecEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	logs, _, err := execlog.ReadFiles(f...)
	return logs, err
}
