package commitmodel

import (
	"strings"
	"testing"
)

const (
	holds     = ""
	twoOwners = "two owners"
	stateLost = "recovery started"
)

// Every rule the design could use, with and without each planted fault:
// the guarantees hold exactly where the proposal says they do
// (docs/proposals/one-write-bulk-moves.md).
func TestCommitRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		want string
	}{
		{"today's intent", Config{Rule: Intent}, holds},
		{"bulk key", Config{Rule: BulkKey}, holds},
		{"bulk key, aborted whole", Config{Rule: BulkKey, BulkAbort: true}, holds},
		// Without a key, recovery cannot tell a moving object from an
		// orphan: a source's crash throws away what the target holds.
		{"no key", Config{Rule: NoKey}, stateLost},
		// ... though one owner still holds, by the store versions alone.
		{"no key, owners only", Config{Rule: NoKey, OwnersOnly: true}, holds},

		{"intent, unsealed without a write", Config{Rule: Intent, Faults: Faults{UnsealWithoutWrite: true}}, twoOwners},
		{"bulk key, unsealed without a write", Config{Rule: BulkKey, Faults: Faults{UnsealWithoutWrite: true}}, twoOwners},
		{"no key, unsealed without a write", Config{Rule: NoKey, OwnersOnly: true, Faults: Faults{UnsealWithoutWrite: true}}, twoOwners},
		{"intent, preserve without its compare", Config{Rule: Intent, Faults: Faults{PreserveSkipsCompare: true}}, twoOwners},
		{"bulk key, preserve without its compare", Config{Rule: BulkKey, Faults: Faults{PreserveSkipsCompare: true}}, twoOwners},
		{"intent, recovery ignores the move", Config{Rule: Intent, Faults: Faults{RecoverIgnoresMove: true}}, stateLost},
		{"bulk key, recovery ignores the move", Config{Rule: BulkKey, Faults: Faults{RecoverIgnoresMove: true}}, stateLost},
		// The commit's compare of the bulk key is what makes deleting the
		// key an abort; with preserves only, the records' versions suffice.
		{"bulk key aborted whole, commit skips the key", Config{Rule: BulkKey, BulkAbort: true, Faults: Faults{CommitSkipsBulkKey: true}}, twoOwners},
		{"bulk key, commit skips the key, preserves only", Config{Rule: BulkKey, Faults: Faults{CommitSkipsBulkKey: true}}, holds},
		// A bulk aborted whole leaves its records' versions as they were:
		// a frame of it must not pass for a frame of the next bulk.
		{"bulk key named per source, aborted whole", Config{Rule: BulkKey, BulkAbort: true, Faults: Faults{KeyPerSource: true}}, twoOwners},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.c.Check()
			t.Log(r)
			switch {
			case tc.want == holds && r.Violation != "":
				t.Fatalf("want every guarantee to hold, got %v", r)
			case tc.want != holds && !strings.HasPrefix(r.Violation, tc.want):
				t.Fatalf("want %q found, got %v", tc.want, r)
			}
			if r.States < 100 {
				t.Fatalf("only %d states explored: the model stopped early", r.States)
			}
		})
	}
}

// The shortest trace is a real path: replaying its steps from the start
// reaches the violation.
func TestTraceReplays(t *testing.T) {
	c := Config{Rule: BulkKey, BulkAbort: true, Faults: Faults{CommitSkipsBulkKey: true}}
	r := c.Check()
	s := Initial()
	for i, name := range r.Trace {
		var found bool
		for _, st := range c.Next(s) {
			if st.What.String() == name {
				s, found = st.To, true
				break
			}
		}
		if !found {
			t.Fatalf("step %d %q is not a step of %v", i, name, s)
		}
	}
	if v := c.Broken(s, false); v != r.Violation {
		t.Fatalf("replayed to %v: broken %q, want %q", s, v, r.Violation)
	}
}

// A commit of a state older than the source's is a lost write even when
// no one crashed: the step says so.
func TestStaleCommitFound(t *testing.T) {
	c := Config{Rule: NoKey}
	s := Initial()
	s.begun[0], s.begun[1] = true, true
	s.src[0] = src{phase: sealed, moves: 2, seen: s.rec[0].rev, ver: 1, sent: true}
	s.tgt[0].st[0] = stage{staged: true, expect: s.rec[0].rev, ver: 0}
	for _, st := range c.Next(s) {
		if st.What.String() == "T commits o0 (move 0)" {
			if !strings.HasPrefix(st.Broke, "T committed a stale state of o0") {
				t.Fatalf("a stale commit went unnoticed: %q", st.Broke)
			}
			return
		}
	}
	t.Fatal("no commit step")
}
