package verify

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/meshloc/meshloc/pkg/node/execlog"
)

// execLine renders one execution log line as pkg/node writes it.
func execLine(owner string, ownerGen int64, obj string, og, ag int64, op string) string {
	l := `{"owner":"` + owner + `","ownerGeneration":` + itoa(ownerGen) + `,"object":"` + obj + `","objectGeneration":` + itoa(og) +
		`,"authorityGeneration":` + itoa(ag)
	if strings.HasPrefix(op, "timer:") {
		l += `,"timer":"` + strings.TrimPrefix(op, "timer:") + `"`
	} else {
		l += `,"op":"` + op + `"`
	}
	return l + `,"t":1732872000000000000}` + "\n"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestReadExecLogFiles(t *testing.T) {
	dir := t.TempDir()
	p1, p2 := filepath.Join(dir, "n1.log"), filepath.Join(dir, "n2.log")
	if err := os.WriteFile(p1, []byte(execLine("n1", 5, "actor/counter/c", 1, 1, "a")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p2, []byte(execLine("n2", 6, "actor/counter/c", 1, 2, "b")+`{"owner":"n2"`), 0o644); err != nil {
		t.Fatal(err)
	}
	var src ExecLogSource = ExecLogFiles{p1, p2}
	logs, err := src.ExecLogs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(logs) != 2 || logs["n1@5"][0].OperationIDs[0] != "a" || logs["n2@6"][0].OperationIDs[0] != "b" {
		t.Fatalf("%+v", logs)
	}
	_, st, err := execlog.ReadFiles(p1, p2)
	if err != nil || st.Files != 2 || st.TornLines != 1 || st.Requests != 2 {
		t.Fatalf("%+v %v", st, err)
	}
	if _, _, err := execlog.ReadFiles(filepath.Join(dir, "absent")); err == nil {
		t.Fatal("no error for an absent file")
	}
}

// One owner executing one operation twice under one fence is a double
// execution too.
func TestCheckExecSamePlaceTwice(t *testing.T) {
	logs, _, err := execlog.Read(strings.NewReader(
		execLine("n1", 5, "actor/register/x", 1, 1, "a") + execLine("n1", 5, "actor/register/x", 1, 1, "a")))
	if err != nil {
		t.Fatal(err)
	}
	c := CheckExecLogs(logs, nil)
	wantViolation(t, c.Violations, "executed-twice")
	if c.DoubleExecutions != 1 || c.Operations != 1 || c.TwoOwnerWindows != 0 {
		t.Fatalf("%+v", c)
	}
}

// An operation that ran under object generation 1 on an owner that died,
// retried on the object re-created with generation 2: allowed when the
// audit shows generation 1 superseded by a recovery, a double execution
// without an audit or without that recovery.
func TestCheckExecReexecutedAfterLoss(t *testing.T) {
	p := newReplay()
	_, n2, n3 := goodLife(p) // x: o1 on n1, moved to n2, n2 died, o2 on n3
	audit := p.r.Result()
	if rs := audit.Recoveries["actor/register/x"]; len(rs) != 1 || rs[0].From != 1 || rs[0].To != 2 || rs[0].DeadOwner != n2 || rs[0].NewOwner != n3 {
		t.Fatalf("recoveries %+v", audit.Recoveries)
	}
	logs := map[string][]ExecEntry{
		n2.String(): {{Object: "actor/register/x", ObjectGeneration: 1, AuthorityGeneration: 2, Requests: 2, OperationIDs: []string{"a", "b"}}},
		n3.String(): {{Object: "actor/register/x", ObjectGeneration: 2, AuthorityGeneration: 3, Requests: 2, OperationIDs: []string{"a", "c"}}},
	}
	c := CheckExecLogs(logs, audit)
	if len(c.Violations) > 0 || c.DoubleExecutions != 0 || c.ReexecutedAfterLoss != 1 || c.Operations != 3 {
		t.Fatalf("%+v\n%s", c, violations(c.Violations))
	}
	rep := &Report{Exec: &c}
	if txt := rep.Text(); !strings.Contains(txt, "re-executed after a declared loss 1") {
		t.Fatalf("report:\n%s", txt)
	}

	c = CheckExecLogs(logs, nil)
	wantViolation(t, c.Violations, "executed-twice")
	if c.DoubleExecutions != 1 || c.ReexecutedAfterLoss != 0 {
		t.Fatalf("without an audit: %+v", c)
	}

	// An audit that saw no recovery of generation 1 (here: a recovery
	// while the owner was alive, itself a violation).
	p = newReplay()
	a, b := p.owner("n1"), p.owner("n2")
	p.put("x", rec(a, 1, 1))
	p.put("x", rec(b, 2, 2))
	audit = p.r.Result()
	logs = map[string][]ExecEntry{
		a.String(): {{Object: "actor/register/x", ObjectGeneration: 1, AuthorityGeneration: 1, OperationIDs: []string{"a"}}},
		b.String(): {{Object: "actor/register/x", ObjectGeneration: 2, AuthorityGeneration: 2, OperationIDs: []string{"a"}}},
	}
	c = CheckExecLogs(logs, audit)
	wantViolation(t, c.Violations, "executed-twice")
	if c.DoubleExecutions != 1 || c.ReexecutedAfterLoss != 0 {
		t.Fatalf("recovery from a live owner: %+v", c)
	}
}

// The de-duplication table not transferred at relocation: one operation
// executed by the source under a1 and again by the target under a2, same
// object generation. Always a double execution, audit or not.
func TestCheckExecDoubleAcrossRelocation(t *testing.T) {
	p := newReplay()
	n1, n2, _ := goodLife(p)
	audit := p.r.Result()
	logs := map[string][]ExecEntry{
		n1.String(): {{Object: "actor/register/x", ObjectGeneration: 1, AuthorityGeneration: 1, OperationIDs: []string{"a", "b"}}},
		n2.String(): {{Object: "actor/register/x", ObjectGeneration: 1, AuthorityGeneration: 2, OperationIDs: []string{"b", "c"}}},
	}
	for _, au := range []*AuditResult{audit, nil} {
		c := CheckExecLogs(logs, au)
		v := wantViolation(t, c.Violations, "executed-twice")
		if !strings.Contains(v.Detail, "operation b") || c.DoubleExecutions != 1 || c.ReexecutedAfterLoss != 0 || c.TwoOwnerWindows != 0 {
			t.Fatalf("audit %v: %+v\n%s", au != nil, c, violations(c.Violations))
		}
	}
}

// A durable object's read (its turn persisted nothing) retried across a
// sleep runs again: not a double execution, whether the other execution
// was a read or the one that changed the state. Two that changed it are.
func TestCheckExecDurableReadRunsAgain(t *testing.T) {
	read := func(ag int64, op string) string {
		return fmt.Sprintf(`{"owner":"n1","ownerGeneration":5,"object":"actor/dlist/x","objectGeneration":1,"authorityGeneration":%d,"op":%q,"read":"durable","t":1}`+"\n", ag, op)
	}
	logs, _, err := execlog.Read(strings.NewReader(read(3, "r") + read(5, "r") + execLine("n1", 5, "actor/dlist/x", 1, 7, "w") + read(9, "w")))
	if err != nil {
		t.Fatal(err)
	}
	c := CheckExecLogs(logs, nil)
	if len(c.Violations) != 0 || c.DoubleExecutions != 0 || c.Reads != 3 {
		t.Fatalf("%+v", c)
	}
	logs, _, err = execlog.Read(strings.NewReader(execLine("n1", 5, "actor/dlist/x", 1, 7, "w") + execLine("n1", 5, "actor/dlist/x", 1, 9, "w")))
	if err != nil {
		t.Fatal(err)
	}
	if c := CheckExecLogs(logs, nil); c.DoubleExecutions != 1 {
		t.Fatalf("two writes: %+v", c)
	}
	if _, _, err := execlog.Read(strings.NewReader(`{"owner":"n1","ownerGeneration":5,"object":"actor/dlist/x","objectGeneration":1,"authorityGeneration":1,"timer":"t","read":"durable","t":1}` + "\n")); err == nil {
		t.Fatal("a timer tick marked read was accepted")
	}
}
