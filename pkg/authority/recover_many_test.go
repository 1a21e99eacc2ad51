package authority_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// RecoverMany recovers 300 orphans and a group of a dead owner in shared
// etcd requests, each with its own outcome, as Recover would give it: an
// orphan whose record changed after it was read is not written while the
// orphans around it are; one whose new owner is dead is not written; an
// invalid request gets its error and holds up nothing; the group comes
// back whole, members included; a second RecoverMany of the same
// snapshots writes nothing.
func TestRecoverManyEachItsOwnOutcome(t *testing.T) {
	c, plain := setup(t)
	s := plain.Batched(authority.DefaultLimits())
	ctx := context.Background()
	dead, lid := owner(t, c, "n1", 30)
	live, _ := owner(t, c, "n2", 30)
	gone := authority.OwnerRef{ID: "n3", Generation: live.Generation + 1000}
	const n = 300
	var reqs []authority.RecoverRequest
	for i := range n {
		seen := activate(t, s, keyspace.Actor("counter", fmt.Sprintf("o%03d", i)), dead)
		reqs = append(reqs, authority.RecoverRequest{Seen: seen, NewOwner: live, Node: node("n2")})
	}
	g := keyspace.Group("g")
	gs := activate(t, s, g, dead)
	for _, m := range []string{"m1", "m2"} {
		res, err := s.Join(ctx, authority.MembershipRequest{Group: gs, Actor: keyspace.Actor("counter", m), Owner: dead, Node: node("n1")})
		if err != nil || !res.Written {
			t.Fatal(res, err)
		}
		gs = res.Group
	}
	reqs = append(reqs, authority.RecoverRequest{Seen: gs, NewOwner: live, Node: node("n2")})
	reqs = append(reqs, authority.RecoverRequest{Seen: authority.Snapshot{Object: keyspace.Actor("counter", "bad")}, NewOwner: live}) // no store version
	if _, err := c.Revoke(ctx, lid); err != nil {
		t.Fatal(err)
	}
	// o150 is recovered by someone else first; o151's new owner is dead.
	if w, err := s.Recover(ctx, reqs[150]); err != nil || !w.Written {
		t.Fatal(w, err)
	}
	reqs[151].NewOwner = gone
	before := s.BatchStats()
	res, errs := s.RecoverMany(ctx, reqs)
	after := s.BatchStats()
	for i, r := range res {
		switch {
		case i == len(reqs)-1:
			if !errors.Is(errs[i], authority.ErrInvalidRequest) || r.Written {
				t.Fatalf("invalid request: %+v %v", r, errs[i])
			}
		case errs[i] != nil:
			t.Fatalf("%s: %v", reqs[i].Seen.Object, errs[i])
		case i == 150 || i == 151:
			if r.Written || !r.Found || r.OwnerAlive {
				t.Fatalf("%s (changed, or new owner dead): %+v; want not written", reqs[i].Seen.Object, r)
			}
		case !r.Written || r.Snapshot.Record.Owner != live || r.Snapshot.Record.ObjectGeneration != 2:
			t.Fatalf("%s: %+v", reqs[i].Seen.Object, r)
		}
	}
	if got := read(t, s, reqs[150].Seen.Object).Record; got.ObjectGeneration != 2 || got.AuthorityGeneration != 2 {
		t.Fatalf("the orphan recovered first was written again: %+v", got)
	}
	if got := read(t, s, reqs[151].Seen.Object); got.StoreVersion != reqs[151].Seen.StoreVersion {
		t.Fatalf("the orphan for a dead new owner was written: %+v", got)
	}
	consistent(t, s, g, "actor/counter/m1", "actor/counter/m2")
	for _, m := range []string{"m1", "m2"} {
		if got := read(t, s, keyspace.Actor("counter", m)).Record; got.Owner != live || got.ObjectGeneration != 2 {
			t.Fatalf("member %s: %+v", m, got)
		}
	}
	// 300 actors of 5 compares each fit 123 to a request; the group goes
	// with them when it fits.
	if d := after.Requests - before.Requests; d == 0 || d > 6 {
		t.Fatalf("%d recoveries took %d etcd requests", n+1, d)
	}
	res, errs = s.RecoverMany(ctx, reqs[:n])
	for i, r := range res {
		if errs[i] != nil || r.Written {
			t.Fatalf("second recovery of %s: %+v %v", reqs[i].Seen.Object, r, errs[i])
		}
	}
}

// A RecoverMany whose context has ended writes nothing it had not sent.
func TestRecoverManyCancelled(t *testing.T) {
	c, s := setup(t)
	dead, lid := owner(t, c, "n1", 30)
	live, _ := owner(t, c, "n2", 30)
	seen := activate(t, s, keyspace.Actor("counter", "c"), dead)
	if _, err := c.Revoke(context.Background(), lid); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, errs := s.RecoverMany(ctx, []authority.RecoverRequest{{Seen: seen, NewOwner: live, Node: node("n2")}})
	if errs[0] == nil || res[0].Written {
		t.Fatalf("cancelled: %+v %v", res[0], errs[0])
	}
	if got := read(t, s, seen.Object); got.StoreVersion != seen.StoreVersion {
		t.Fatalf("written after its context ended: %+v", got)
	}
}
