package authority_test

import (
	"context"
	"testing"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

type commitFunc func(context.Context, authority.CommitRequest) (authority.CommitResult, error)

// commitAfterPreserve preserves object name for a relocation to dst and
// then commits it with commit: the late commit that a preserve must beat.
func commitAfterPreserve(t *testing.T, s *authority.Store, src, dst authority.OwnerRef, name string, commit commitFunc) (authority.CommitResult, authority.Snapshot) {
	t.Helper()
	ctx := context.Background()
	obj := keyspace.Actor("counter", name)
	seen := intend(t, s, activate(t, s, obj, src), src, 0, dst, "r-"+name)
	if w, err := s.Preserve(ctx, authority.PreserveRequest{Seen: seen, Source: src, RelocationID: "r-" + name}); err != nil || !w.Written {
		t.Fatalf("preserve: %+v %v", w, err)
	}
	res, err := commit(ctx, authority.CommitRequest{RelocationID: "r-" + name,
		Participants: []authority.Participant{{Expected: seen}}, Target: dst, TargetNode: node("dst")})
	if err != nil {
		t.Fatal(err)
	}
	cur, _ := s.Read(ctx, obj)
	return res, cur
}

// A commit after a winning preserve fails on the record the preserve
// rewrote: exactly one of commit and preserve wins.
func TestCommitAfterPreserve(t *testing.T) {
	c, s := setup(t)
	src, _ := owner(t, c, "src", 60)
	dst, _ := owner(t, c, "dst", 60)
	if res, cur := commitAfterPreserve(t, s, src, dst, "correct", s.Commit); res.Committed || cur.Record.Owner != src {
		t.Fatalf("late commit: committed=%v, owner %v; want refused, the source's", res.Committed, cur.Record.Owner)
	}
}
