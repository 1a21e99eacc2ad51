package statecheck_test

import (
	"testing"

	"github.com/meshloc/meshloc/internal/verify/statecheck"
	"github.com/meshloc/meshloc/pkg/node/execlog"
)

func entry(obj string, og, ag int64, states ...execlog.StateEvent) execlog.Entry {
	return execlog.Entry{Object: obj, ObjectGeneration: og, AuthorityGeneration: ag, States: states}
}

func claim(v int64, seq uint64) execlog.StateEvent {
	return execlog.StateEvent{Kind: "claim", Version: v, Seq: seq}
}

func write(v int64, seq uint64) execlog.StateEvent {
	return execlog.StateEvent{Kind: "write", Version: v, Seq: seq}
}

func checks(r statecheck.Result) []string {
	var out []string
	for _, v := range r.Violations {
		out = append(out, v.Check)
	}
	return out
}

// A correct history: P writes, Q (newer fence) claims after and loads
// P's last write, writes on; P's write that Q's claim refused is not
// logged. In etcd a claim reads at the version of the write it loads.
func TestCorrect(t *testing.T) {
	logs := map[string][]execlog.Entry{
		"p@1": {entry("o", 1, 1, claim(1, 0), write(2, 1), write(3, 2))},
		"q@2": {entry("o", 2, 2, claim(4, 2), write(5, 3))},
		"e@3": {entry("x", 1, 1, write(10, 1)), entry("x", 1, 2, claim(10, 1), write(11, 2))},
	}
	if r := statecheck.Check(logs); len(r.Violations) != 0 || r.Claims != 3 || r.Writes != 5 {
		t.Fatalf("%+v", r)
	}
}

// A write under an older fence after a newer claim, and a claim that
// loaded less than the write before it, are both caught.
func TestViolations(t *testing.T) {
	logs := map[string][]execlog.Entry{
		"p@1": {entry("o", 1, 1, claim(1, 0), write(2, 1), write(5, 2))},
		"q@2": {entry("o", 2, 2, claim(4, 1))},
	}
	got := checks(statecheck.Check(logs))
	if len(got) != 1 || got[0] != "stale-write" {
		t.Fatalf("stale write: %v", got)
	}
	logs = map[string][]execlog.Entry{
		"p@1": {entry("o", 1, 1, claim(1, 0), write(2, 1), write(3, 2))},
		"q@2": {entry("o", 2, 2, claim(4, 1))},
	}
	got = checks(statecheck.Check(logs))
	if len(got) != 1 || got[0] != "claim-missed-write" {
		t.Fatalf("missed write: %v", got)
	}
}

// A deleted generation's writes, and writes before a fresh claim, bind no
// later claim; a fresh claim audits nothing.
func TestDeletedAndFresh(t *testing.T) {
	logs := map[string][]execlog.Entry{
		"p@1": {entry("o", 1, 1, claim(1, 0), write(2, 5), write(9, 6))},
		"q@2": {entry("o", 2, 1, execlog.StateEvent{Kind: "claim", Version: 3, Fresh: true}),
			entry("o", 2, 2, execlog.StateEvent{Kind: "claim", Version: 4, Deleted: 1})},
	}
	if r := statecheck.Check(logs); len(r.Violations) != 0 {
		t.Fatalf("%+v", r)
	}
}
