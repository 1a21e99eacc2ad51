package authority_test

import (
	"context"
	"testing"

	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// A commit after a winning preserve fails on the record the preserve
// rewrote (exactly one of commit and preserve wins). With the planted bug
// commit-without-compare (failpoints builds) it lands over the preserved
// record; the target owner's key is still compared (a commit to a dead
// target stays refused).
func TestCommitAfterPreservePlanted(t *testing.T) {
	c, s := setup(t)
	src, _ := owner(t, c, "src", 60)
	dst, _ := owner(t, c, "dst", 60)
	ctx := context.Background()
	commitLate := func(name string) (authority.CommitResult, authority.Snapshot) {
		obj := keyspace.Actor("counter", name)
		seen := intend(t, s, activate(t, s, obj, src), src, 0, dst, "r-"+name)
		if w, err := s.Preserve(ctx, authority.PreserveRequest{Seen: seen, Source: src, RelocationID: "r-" + name}); err != nil || !w.Written {
			t.Fatalf("preserve: %+v %v", w, err)
		}
		res, err := s.Commit(ctx, authority.CommitRequest{RelocationID: "r-" + name,
			Participants: []authority.Participant{{Expected: seen}}, Target: dst, TargetNode: node("dst")})
		if err != nil {
			t.Fatal(err)
		}
		cur, _ := s.Read(ctx, obj)
		return res, cur
	}
	if res, cur := commitLate("correct"); res.Committed || cur.Record.Owner != src {
		t.Fatalf("late commit: committed=%v, owner %v; want refused, the source's", res.Committed, cur.Record.Owner)
	}
	if !failpoint.Enabled {
		t.Skip("planting needs -tags failpoints")
	}
	defer failpoint.Plant(failpoint.BugCommitWithoutCompare)()
	if res, cur := commitLate("planted"); !res.Committed || cur.Record.Owner != dst {
		t.Fatalf("planted late commit: committed=%v, owner %v; want it landed over the preserved record", res.Committed, cur.Record.Owner)
	}
	dead := authority.OwnerRef{ID: "gone", Generation: dst.Generation + 1000}
	obj := keyspace.Actor("counter", "dead")
	seen := intend(t, s, activate(t, s, obj, src), src, 0, dead, "r-dead")
	if res, err := s.Commit(ctx, authority.CommitRequest{RelocationID: "r-dead",
		Participants: []authority.Participant{{Expected: seen}}, Target: dead, TargetNode: node("gone")}); err != nil || res.Committed {
		t.Fatalf("planted commit to a dead target: %+v %v; want refused (the owner key is still compared)", res, err)
	}
}
