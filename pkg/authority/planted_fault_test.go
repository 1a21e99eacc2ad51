//go:build failpoints

package authority_test

import (
	"context"
	"testing"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// The planted bug commit-without-compare (the commit a test build's node
// puts in its Store seam) lands a late commit over the preserved record;
// the target owner's key is still compared, so a commit to a dead target
// stays refused.
func TestCommitAfterPreservePlanted(t *testing.T) {
	c, s := setup(t)
	src, _ := owner(t, c, "src", 60)
	dst, _ := owner(t, c, "dst", 60)
	if res, cur := commitAfterPreserve(t, s, src, dst, "planted", s.CommitWithoutCompare); !res.Committed || cur.Record.Owner != dst {
		t.Fatalf("planted late commit: committed=%v, owner %v; want it landed over the preserved record", res.Committed, cur.Record.Owner)
	}
	dead := authority.OwnerRef{ID: "gone", Generation: dst.Generation + 1000}
	obj := keyspace.Actor("counter", "dead")
	seen := intend(t, s, activate(t, s, obj, src), src, 0, dead, "r-dead")
	if res, err := s.CommitWithoutCompare(context.Background(), authority.CommitRequest{RelocationID: "r-dead",
		Participants: []authority.Participant{{Expected: seen}}, Target: dead, TargetNode: node("gone")}); err != nil || res.Committed {
		t.Fatalf("planted commit to a dead target: %+v %v; want refused (the owner key is still compared)", res, err)
	}
}
