package authority_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// TestBatchedBulkCommits: a bulk's commits in flight together share
// batches, whose compares common to all (the target's owner key, a bulk's
// fence) etcd evaluates once. Each commit still ends by its own compares:
// of two bulks committing together, every unit commits but those preserved
// first; of a bulk aborted first, none does, and each failed commit reports
// the record as it is.
func TestBatchedBulkCommits(t *testing.T) {
	c, plain := setup(t)
	s := plain.Batched(authority.DefaultLimits())
	src, _ := owner(t, c, "src", 60)
	dst, _ := owner(t, c, "dst", 60)
	ctx := context.Background()
	const n = 40
	bulk := func(id string) ([]authority.Snapshot, authority.BulkIntent, int64) {
		snaps := make([]authority.Snapshot, n)
		for i := range n {
			snaps[i] = activate(t, plain, keyspace.Actor("counter", fmt.Sprintf("%s-%d", id, i)), src)
		}
		b := bulkOf(src, dst, 1_000_000, snaps...)
		res, err := plain.WriteBulkIntent(ctx, id, b)
		if err != nil || !res.Written {
			t.Fatalf("bulk intent %s: %+v %v", id, res, err)
		}
		return snaps, b, res.Revision
	}
	commitAll := func(id string, rev int64, snaps []authority.Snapshot, b authority.BulkIntent, out []authority.CommitResult, wg *sync.WaitGroup) {
		for i := range n {
			wg.Go(func() {
				r, err := s.Commit(ctx, bulkCommit(id, rev, snaps[i], b.Units[i].RelocationID, dst))
				if err != nil {
					t.Errorf("commit %s/%d: %v", id, i, err)
				}
				out[i] = r
			})
		}
	}

	aSnaps, a, aRev := bulk("a")
	cSnaps, cb, cRev := bulk("c")
	const preserved = 5
	for i := range preserved {
		if w, err := plain.Preserve(ctx, authority.PreserveRequest{Seen: aSnaps[i], Source: src, RelocationID: a.Units[i].RelocationID}); err != nil || !w.Written {
			t.Fatalf("preserve a/%d: %+v %v", i, w, err)
		}
	}
	aRes, cRes := make([]authority.CommitResult, n), make([]authority.CommitResult, n)
	var wg sync.WaitGroup
	commitAll("a", aRev, aSnaps, a, aRes, &wg)
	commitAll("c", cRev, cSnaps, cb, cRes, &wg)
	wg.Wait()
	for i := range n {
		if aRes[i].Committed != (i >= preserved) || !cRes[i].Committed {
			t.Fatalf("unit %d: a committed %v (preserved first: %v), c committed %v", i, aRes[i].Committed, i < preserved, cRes[i].Committed)
		}
		cur, err := plain.Read(ctx, aSnaps[i].Object)
		if want := map[bool]string{true: dst.ID, false: src.ID}[i >= preserved]; err != nil || cur.Record.Owner.ID != want {
			t.Fatalf("a/%d owned by %+v (%v), want %s", i, cur.Record.Owner, err, want)
		}
	}

	bSnaps, bb, bRev := bulk("b")
	if del, err := plain.DeleteBulkIntent(ctx, "b", bRev, src); err != nil || !del {
		t.Fatalf("abort b: %v %v", del, err)
	}
	before := s.BatchStats()
	bRes := make([]authority.CommitResult, n)
	commitAll("b", bRev, bSnaps, bb, bRes, &wg)
	wg.Wait()
	after := s.BatchStats()
	for i, r := range bRes {
		got := r.Records[bSnaps[i].Object.String()]
		if r.Committed || !r.TargetAlive || got.Record.Owner != src || got.StoreVersion != bSnaps[i].StoreVersion {
			t.Fatalf("b/%d after the abort: %+v", i, r)
		}
	}
	// Every fence of b fails: a batch of two or more of its commits had
	// its shared compares fail, and went again without them.
	misses, requests, writes := after.HoistMisses-before.HoistMisses, after.Requests-before.Requests, after.Writes-before.Writes
	t.Logf("b: %d writes, %d requests, %d sent again", writes, requests, misses)
	if misses == 0 && requests != writes {
		t.Fatalf("%d writes in %d requests, and no batch went again", writes, requests)
	}
}
