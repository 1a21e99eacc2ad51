package verify

import (
	"context"
	"fmt"
	"sort"
)

// ExecEntry is one line of a node's execution log, aggregated: the node
// executed requests on an object under this fence.
type ExecEntry struct {
	Object              string `json:"object"`
	ObjectGeneration    int64  `json:"objectGeneration"`
	AuthorityGeneration int64  `json:"authorityGeneration"`
	// Requests executed under the fence (0: not counted).
	Requests int64 `json:"requests,omitempty"`
	// OperationIDs executed under the fence, when the node logs them: each
	// must appear in one entry of one node only (no request executed twice).
	OperationIDs []string `json:"operationIds,omitempty"`
}

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
	// DoubleExecutions: operation ids executed in more than one place.
	DoubleExecutions int         `json:"doubleExecutions"`
	Violations       []Violation `json:"violations,omitempty"`
}

// CheckExecLogs checks that for every (object, object generation, authority
// generation) exactly one owner executed requests, the one etcd's record
// named for that fence (when the audit is given), and that no operation id
// was executed twice.
func CheckExecLogs(logs map[string][]ExecEntry, audit *AuditResult) ExecCheck {
	var c ExecCheck
	c.Nodes = len(logs)
	nodes := make([]string, 0, len(logs))
	for n := range logs {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	by := map[FenceKey][]string{}
	opAt := map[string]string{}
	for _, n := range nodes {
		for _, e := range logs[n] {
			c.Entries++
			k := FenceKey{Object: e.Object, ObjectGeneration: e.ObjectGeneration, AuthorityGeneration: e.AuthorityGeneration}
			if l := by[k]; len(l) == 0 || l[len(l)-1] != n {
				by[k] = append(by[k], n)
			}
			for _, op := range e.OperationIDs {
				where := fmt.Sprintf("%s under %v", n, k)
				if prev, ok := opAt[op]; ok && prev != where {
					c.DoubleExecutions++
					c.Violations = append(c.Violations, Violation{Check: "executed-twice", Object: e.Object,
						Detail: fmt.Sprintf("operation %s executed by %s and by %s", op, prev, where)})
					continue
				}
				opAt[op] = where
			}
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
