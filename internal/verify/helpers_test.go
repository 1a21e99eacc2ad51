package verify

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// ms is a time in the synthetic histories: milliseconds → nanoseconds.
func ms(n int) int64 { return int64(n) * 1e6 }

// fence is the fence of generations (obj, aut) served by owner@1.
func fence(owner string, obj, aut int64) Fence {
	return Fence{Owner: owner, OwnerGeneration: 1, ObjectGeneration: obj, AuthorityGeneration: aut}
}

var g11 = fence("n1", 1, 1)

func jsonOf(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// hist builds a synthetic history.
type hist struct {
	h *History
}

func newHist() *hist { return &hist{h: NewHistory()} }

// ok records an acknowledged op.
func (b *hist) ok(client int, workload, obj, kind string, in []string, out any, call, ret int, f Fence) Op {
	o := Op{Client: client, Workload: workload, Object: obj, Kind: kind, Input: in, Output: jsonOf(out),
		Call: ms(call), Return: ms(ret), End: ms(ret), Outcome: OK, Fence: f}
	o.ID = b.h.Add(o)
	return o
}

func (b *hist) final(client int, workload, obj, kind string, out any, call, ret int, f Fence) Op {
	o := Op{Client: client, Workload: workload, Object: obj, Kind: kind, Output: jsonOf(out),
		Call: ms(call), Return: ms(ret), End: ms(ret), Outcome: OK, Fence: f, Final: true}
	o.ID = b.h.Add(o)
	return o
}

func (b *hist) unknown(client int, workload, obj, kind string, in []string, call int) Op {
	o := Op{Client: client, Workload: workload, Object: obj, Kind: kind, Input: in,
		Call: ms(call), End: ms(call + 5000), Outcome: Unknown, Code: pb.Code_CODE_DEADLINE_EXCEEDED}
	o.ID = b.h.Add(o)
	return o
}

func (b *hist) fail(client int, workload, obj, kind string, in []string, code pb.Code, call, ret int, f Fence) Op {
	o := Op{Client: client, Workload: workload, Object: obj, Kind: kind, Input: in,
		Call: ms(call), Return: ms(ret), End: ms(ret), Outcome: Fail, Code: code, Fence: f}
	o.ID = b.h.Add(o)
	return o
}

// finalState makes the final reads from the history's Final ops.
func (b *hist) finalState(audit *AuditResult) FinalState {
	fs := FinalState{Reads: map[string]Op{}, Audit: audit}
	for _, o := range b.h.Ops() {
		if o.Final && o.Outcome == OK {
			fs.Reads[o.Object] = o
		}
	}
	return fs
}

// wantClean fails unless the result has no violation and the figures say so.
func wantClean(t *testing.T, r Result) {
	t.Helper()
	if len(r.Violations) > 0 || r.Lost != 0 || r.Duplicated != 0 || r.Unexpected != 0 || r.StaleReads != 0 {
		t.Fatalf("%s: want a clean result, got verdict %s lost %d dup %d unexpected %d stale %d:\n%s",
			r.Workload, r.Verdict, r.Lost, r.Duplicated, r.Unexpected, r.StaleReads, violations(r.Violations))
	}
}

// wantViolation fails unless a violation of check was found.
func wantViolation(t *testing.T, vs []Violation, check string) Violation {
	t.Helper()
	for _, v := range vs {
		if v.Check == check || strings.HasSuffix(v.Check, "/"+check) {
			return v
		}
	}
	t.Fatalf("no %q violation among:\n%s", check, violations(vs))
	return Violation{}
}

func violations(vs []Violation) string {
	var b strings.Builder
	for _, v := range vs {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	if len(vs) == 0 {
		return "  (none)"
	}
	return b.String()
}
