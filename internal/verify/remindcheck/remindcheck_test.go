package remindcheck_test

import (
	"testing"

	"github.com/meshloc/meshloc/internal/verify/remindcheck"
	"github.com/meshloc/meshloc/pkg/node/execlog"
)

func TestCheck(t *testing.T) {
	logs := map[string][]execlog.Entry{
		"n1@1": {{Object: "actor/dcounter/a", ObjectGeneration: 1, AuthorityGeneration: 1,
			Reminders: map[string]string{"op1": "p@3@1000", "op2": "o:x@4@1500"}}},
		"n2@1": {{Object: "actor/dcounter/a", ObjectGeneration: 1, AuthorityGeneration: 2,
			Reminders: map[string]string{"op3": "p@3@2000", "op4": "p@3@1000"}}},
	}
	r := remindcheck.Check(logs)
	if r.Firings != 4 || r.Twice != 1 || len(r.Violations) != 1 {
		t.Fatalf("%+v", r)
	}
	r.Expect("actor/dcounter/a", "o:x", 1500)
	r.Expect("actor/dcounter/a", "o:y", 1500)
	r.Expect("actor/dcounter/b", "o:x", 1500)
	if r.Missing != 2 || len(r.NotRun) != 2 {
		t.Fatalf("missing %d: %v", r.Missing, r.NotRun)
	}
}
