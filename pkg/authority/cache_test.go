package authority_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

func runCache(t *testing.T, cache *authority.Cache) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = cache.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-cache.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("cache not ready")
	}
}

func TestCacheFollowsCommits(t *testing.T) {
	c, s := setup(t)
	src, _ := owner(t, c, "src", 30)
	dst, _ := owner(t, c, "dst", 30)
	pre := activate(t, s, keyspace.Actor("counter", "pre"), src)
	cache := authority.NewCache(c, keys)
	runCache(t, cache)
	if loc, ok := cache.Lookup(pre.Object); !ok || loc.Owner != src {
		t.Fatalf("loaded %+v %v", loc, ok)
	}
	obj := keyspace.Actor("counter", "c")
	seen := intend(t, s, activate(t, s, obj, src), src, 0, dst, "r")
	res, err := s.Commit(context.Background(), authority.CommitRequest{RelocationID: "r", Participants: []authority.Participant{{Expected: seen}}, Target: dst, TargetNode: node("dst")})
	if err != nil || !res.Committed {
		t.Fatal(res, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cache.WaitRevision(ctx, res.Revision); err != nil {
		t.Fatal(err)
	}
	loc, ok := cache.Lookup(obj)
	if !ok || loc.Owner != dst || loc.AuthorityGeneration != 2 || loc.StoreVersion != res.Revision {
		t.Fatalf("after commit: %+v", loc)
	}
	if cache.FreshAt().IsZero() {
		t.Fatal("never fresh")
	}
}

func TestCacheNeverMovesBackwards(t *testing.T) {
	c, s := setup(t)
	src, _ := owner(t, c, "src", 30)
	dst, _ := owner(t, c, "dst", 30)
	obj := keyspace.Actor("counter", "c")
	seen := intend(t, s, activate(t, s, obj, src), src, 0, dst, "r")
	res, err := s.Commit(context.Background(), authority.CommitRequest{RelocationID: "r", Participants: []authority.Participant{{Expected: seen}}, Target: dst, TargetNode: node("dst")})
	if err != nil || !res.Committed {
		t.Fatal(res, err)
	}
	cache := authority.NewCache(c, keys)
	// Fed the newer record first (a transaction result), then the older one
	// (a slow watch, a stale hint): the older one is ignored.
	if !cache.Observe(res.Records[obj.String()]) {
		t.Fatal("newer observation ignored")
	}
	if cache.Observe(seen) {
		t.Fatal("older observation applied")
	}
	if loc, _ := cache.Lookup(obj); loc.Owner != dst {
		t.Fatalf("cache went back to %v", loc.Owner)
	}
	runCache(t, cache) // the load brings the same revision: no change
	if loc, _ := cache.Lookup(obj); loc.Owner != dst || loc.StoreVersion != res.Revision {
		t.Fatalf("after load: %+v", loc)
	}
}

// A compacted watch re-lists and resumes.
func TestCacheSurvivesCompaction(t *testing.T) {
	c, s := setup(t)
	src, _ := owner(t, c, "src", 30)
	cache := authority.NewCache(c, keys)
	runCache(t, cache)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var last authority.Snapshot
	for i := range 50 {
		last = activate(t, s, keyspace.Actor("counter", fmt.Sprintf("k%d", i)), src)
		if i == 25 {
			if _, err := c.Compact(ctx, last.StoreVersion); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cache.WaitRevision(ctx, last.StoreVersion); err != nil {
		t.Fatal(err)
	}
	if cache.Len() != 50 {
		t.Fatalf("cache holds %d, want 50", cache.Len())
	}
}

// The cache keeps a group's whole record as it saw it last, from Observe
// or from the watch, at its version; a copy each time (a caller's change is
// not the cache's), none for an actor, none once deleted.
func TestCacheKeepsGroupRecords(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	n1, _ := owner(t, c, "n1", 30)
	g := keyspace.Group("cached")
	gs := activate(t, s, g, n1)
	a := keyspace.Actor("counter", "cached")
	cache := authority.NewCache(c, keys)
	runCache(t, cache)
	if got, ok := cache.Group(g.String()); !ok || got.StoreVersion != gs.StoreVersion || len(got.Record.Members) != 0 {
		t.Fatalf("loaded group: %+v %v, want version %d", got, ok, gs.StoreVersion)
	}
	res, err := s.Join(ctx, authority.MembershipRequest{Group: gs, Actor: a, Owner: n1, Node: node("n1")})
	if err != nil || !res.Written {
		t.Fatalf("join: %v %+v", err, res)
	}
	cache.Observe(res.Group) // the transaction's result, before the watch brings it
	got, ok := cache.Group(g.String())
	if !ok || got.StoreVersion != res.Group.StoreVersion || len(got.Record.Members) != 1 || got.Record.Members[0] != a.String() {
		t.Fatalf("observed group: %+v %v", got, ok)
	}
	got.Record.Members[0] = "changed by the caller"
	if again, _ := cache.Group(g.String()); again.Record.Members[0] != a.String() {
		t.Fatalf("the cache's record changed with a caller's copy: %v", again.Record.Members)
	}
	if _, ok := cache.Group(a.String()); ok {
		t.Fatal("an actor's record kept as a group's")
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	put, err := c.Put(ctx, keys.Authority(g), string(res.Group.Record.Encode())) // the same bytes again
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.WaitRevision(wctx, put.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if got, ok := cache.Group(g.String()); !ok || got.StoreVersion != put.Header.Revision || len(got.Record.Members) != 1 {
		t.Fatalf("watched group: %+v %v, want version %d", got, ok, put.Header.Revision)
	}
	del, err := c.Delete(ctx, keys.Authority(g))
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.WaitRevision(wctx, del.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if _, ok := cache.Group(g.String()); ok {
		t.Fatal("a deleted group's record kept")
	}
}
