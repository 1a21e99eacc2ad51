package client

import (
	"testing"

	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/pkg/authority"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// A reply whose fence is older than one already seen for the object comes
// from a superseded owner: refused. With the planted bug no-generation-check
// (failpoints build) it is accepted, and the newest fence is kept.
func TestAcceptRefusesOlderFence(t *testing.T) {
	newer := &pb.Fence{OwnerId: "n2", OwnerGeneration: 9, ObjectGeneration: 2, AuthorityGeneration: 1}
	older := []*pb.Fence{
		{OwnerId: "n1", OwnerGeneration: 7, ObjectGeneration: 1, AuthorityGeneration: 5}, // older object generation
		{OwnerId: "n1", OwnerGeneration: 7, ObjectGeneration: 2, AuthorityGeneration: 0}, // older authority generation
	}
	check := func(t *testing.T, planted bool) {
		c := &Client{fences: map[string]authority.Fence{}}
		if !c.accept("actor/list/a", newer) {
			t.Fatal("the first fence was refused")
		}
		for _, f := range older {
			if got := c.accept("actor/list/a", f); got != planted {
				t.Errorf("older fence %v: accepted %v, want %v", f, got, planted)
			}
		}
		if cur := c.fences["actor/list/a"]; cur != fenceOf(newer) {
			t.Errorf("newest fence %+v replaced by %+v", fenceOf(newer), cur)
		}
		if !c.accept("actor/list/a", newer) {
			t.Error("the same fence again was refused")
		}
	}
	t.Run("correct", func(t *testing.T) { check(t, false) })
	t.Run("planted", func(t *testing.T) {
		if !failpoint.Enabled {
			t.Skip("planting needs -tags failpoints")
		}
		defer failpoint.Plant(failpoint.BugNoGenerationCheck)()
		check(t, true)
	})
}
