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
	if !ok || loc.Owner != dst || loc.OwnerGeneration != 2 || loc.StoreVersion != res.Revision {
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
