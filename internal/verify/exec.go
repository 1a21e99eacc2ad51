package verify

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
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
	// OperationIDs executed under the fence, when the node logs them, once
	// per execution: each must appear once in one entry of one node only (no
	// request executed twice; see CheckExecLogs for the one exception).
	OperationIDs []string `json:"operationIds,omitempty"`
	// TimerTicks handled under the fence (they count for the single-owner
	// check, and carry no operation id).
	TimerTicks int64 `json:"timerTicks,omitempty"`
	// Messages are the executions (among OperationIDs) of messages from
	// other objects: operation id → sender (docs/design.md §13).
	Messages map[string]string `json:"messages,omitempty"`
	// Replies are the OnReply turns (among OperationIDs): operation id →
	// the id of the message whose answer they took.
	Replies map[string]string `json:"replies,omitempty"`
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
	ReexecutedAfterLoss int         `json:"reexecutedAfterLoss"`
	Violations          []Violation `json:"violations,omitempty"`
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
				runs[op] = append(runs[op], execution{owner: n, k: k})
			}
		}
	}
	c.Operations = len(runs)
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

// ---------------------------------------------------------------- reading

// ExecLine is one line of a meshnode's execution log (--exec-log): one
// execution of a request (Op) or of a timer tick (Timer) by Owner@
// OwnerGeneration under the fence (Object, ObjectGeneration,
// AuthorityGeneration); T is the execution's start, Unix nanoseconds.
type ExecLine struct {
	Owner               string `json:"owner"`
	OwnerGeneration     int64  `json:"ownerGeneration"`
	Object              string `json:"object"`
	ObjectGeneration    int64  `json:"objectGeneration"`
	AuthorityGeneration int64  `json:"authorityGeneration"`
	Op                  string `json:"op,omitempty"`
	Timer               string `json:"timer,omitempty"`
	// From names the sender of a message execution; ReplyTo the message
	// whose answer an OnReply turn took (both with Op).
	From    string `json:"from,omitempty"`
	ReplyTo string `json:"replyTo,omitempty"`
	T       int64  `json:"t"`
}

// OwnerKey is the owner that executed: "id@generation".
func (l ExecLine) OwnerKey() string { return fmt.Sprintf("%s@%d", l.Owner, l.OwnerGeneration) }

func (l ExecLine) validate() error {
	switch {
	case l.Owner == "" || l.OwnerGeneration <= 0:
		return errors.New("no owner or owner generation")
	case l.Object == "" || l.ObjectGeneration <= 0 || l.AuthorityGeneration <= 0:
		return errors.New("no object, object generation or authority generation")
	case (l.Op == "") == (l.Timer == ""):
		return errors.New("want exactly one of op and timer")
	case (l.From != "" || l.ReplyTo != "") && l.Op == "":
		return errors.New("from or replyTo without op")
	case l.From != "" && l.ReplyTo != "":
		return errors.New("both from and replyTo")
	}
	return nil
}

// ExecLogStats describes what the reader read.
type ExecLogStats struct {
	Files      int   `json:"files"`
	Lines      int   `json:"lines"`
	Requests   int64 `json:"requests"`
	TimerTicks int64 `json:"timerTicks"`
	// Messages: executions of messages from other objects (among Requests).
	Messages int64 `json:"messages"`
	// TornLines: partial lines skipped, written by a node killed in the
	// middle of the write (its reply never left): at the end of a file, or
	// in the middle when a restarted node terminated it and appended its own.
	TornLines int `json:"tornLines"`
}

// execAgg aggregates lines into entries per owner and fence, in the order
// each fence first appears.
type execAgg struct {
	logs  map[string][]ExecEntry
	at    map[string]map[FenceKey]int
	stats ExecLogStats
}

func newExecAgg() *execAgg {
	return &execAgg{logs: map[string][]ExecEntry{}, at: map[string]map[FenceKey]int{}}
}

func (a *execAgg) add(l ExecLine) {
	owner := l.OwnerKey()
	k := FenceKey{Object: l.Object, ObjectGeneration: l.ObjectGeneration, AuthorityGeneration: l.AuthorityGeneration}
	idx, ok := a.at[owner]
	if !ok {
		idx = map[FenceKey]int{}
		a.at[owner] = idx
	}
	i, ok := idx[k]
	if !ok {
		i = len(a.logs[owner])
		idx[k] = i
		a.logs[owner] = append(a.logs[owner], ExecEntry{Object: l.Object, ObjectGeneration: l.ObjectGeneration, AuthorityGeneration: l.AuthorityGeneration})
	}
	e := &a.logs[owner][i]
	a.stats.Lines++
	if l.Timer != "" {
		e.TimerTicks++
		a.stats.TimerTicks++
		return
	}
	e.Requests++
	e.OperationIDs = append(e.OperationIDs, l.Op)
	a.stats.Requests++
	switch {
	case l.From != "":
		if e.Messages == nil {
			e.Messages = map[string]string{}
		}
		e.Messages[l.Op] = l.From
		a.stats.Messages++
	case l.ReplyTo != "":
		if e.Replies == nil {
			e.Replies = map[string]string{}
		}
		e.Replies[l.Op] = l.ReplyTo
	}
}

// read adds the lines of one log. A partial last line (no newline: its
// writer was killed mid-write) is skipped and counted. A partial line
// in the middle (a JSON value cut short) is skipped and counted too, only
// when the lines around it come from different owner lives (a restarted
// node terminated its predecessor's torn line). Any other malformed line is
// an error naming its line number.
func (a *execAgg) read(r io.Reader, name string) error {
	br := bufio.NewReader(r)
	var lastOwner string
	tornAt, tornAfter := 0, "" // a torn line in the middle, and the owner before it
	for no := 1; ; no++ {
		raw, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return fmt.Errorf("%s: line %d: %w", name, no, err)
		}
		if err == io.EOF {
			if len(bytes.TrimSpace(raw)) > 0 {
				a.stats.TornLines++
			}
			return nil
		}
		line := bytes.TrimSpace(raw)
		if len(line) == 0 {
			continue
		}
		var l ExecLine
		dec := json.NewDecoder(bytes.NewReader(line))
		derr := dec.Decode(&l)
		if errors.Is(derr, io.ErrUnexpectedEOF) {
			if tornAt != 0 {
				return fmt.Errorf("%s: line %d: malformed (cut short; line %d was too)", name, no, tornAt)
			}
			tornAt, tornAfter = no, lastOwner
			a.stats.TornLines++
			continue
		}
		if derr == nil {
			if _, terr := dec.Token(); terr != io.EOF {
				derr = errors.New("data after the JSON object")
			}
		}
		if derr == nil {
			derr = l.validate()
		}
		if derr != nil {
			return fmt.Errorf("%s: line %d: malformed: %v", name, no, derr)
		}
		if tornAt != 0 {
			if tornAfter != "" && tornAfter == l.OwnerKey() {
				return fmt.Errorf("%s: line %d: malformed (cut short, yet %s wrote on after it)", name, tornAt, tornAfter)
			}
			tornAt = 0
		}
		lastOwner = l.OwnerKey()
		a.add(l)
	}
}

// ReadExecLog reads one node's execution log (the lines pkg/node
// writes with --exec-log) and aggregates it per owner ("id@generation")
// and fence.
func ReadExecLog(r io.Reader) (map[string][]ExecEntry, ExecLogStats, error) {
	a := newExecAgg()
	a.stats.Files = 1
	if err := a.read(r, "execution log"); err != nil {
		return nil, a.stats, err
	}
	return a.logs, a.stats, nil
}

// ReadExecLogFiles reads and aggregates the execution logs of several
// nodes (a restarted node's lives share one file; each is its own owner).
func ReadExecLogFiles(paths ...string) (map[string][]ExecEntry, ExecLogStats, error) {
	a := newExecAgg()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, a.stats, fmt.Errorf("execution log: %w", err)
		}
		err = a.read(f, p)
		f.Close()
		if err != nil {
			return nil, a.stats, err
		}
		a.stats.Files++
	}
	return a.logs, a.stats, nil
}

// ExecLogFiles is an ExecLogSource over the nodes' --exec-log files.
type ExecLogFiles []string

// ExecLogs reads the files (ReadExecLogFiles).
func (f ExecLogFiles) ExecLogs(ctx context.Context) (map[string][]ExecEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	logs, _, err := ReadExecLogFiles(f...)
	return logs, err
}
