package authority_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// Batched, a commit and a preserve of one record often share a batch:
// etcd refuses the batch (two writes of one key) and each goes alone, so
// exactly one wins, as unbatched (TestCommitPreserveRace200). Intents of
// different objects in flight together all land, in fewer round trips.
func TestBatchedCommitPreserveRace(t *testing.T) {
	c, plain := setup(t)
	s := plain.Batched(authority.DefaultLimits())
	src, _ := owner(t, c, "src", 60)
	dst, _ := owner(t, c, "dst", 60)
	ctx := context.Background()
	for i := range 100 {
		obj := keyspace.Actor("counter", fmt.Sprintf("o%d", i))
		cres, pres, cerr, perr := racePair(t, s, obj, src, dst, fmt.Sprintf("r%d", i))
		if cerr != nil || perr != nil || cres.Committed == pres.Written {
			t.Fatalf("iteration %d: committed=%v (%v) preserved=%v (%v), want exactly one", i, cres.Committed, cerr, pres.Written, perr)
		}
	}

	const n = 64
	seen := make([]authority.Snapshot, n)
	for i := range n {
		seen[i] = activate(t, s, keyspace.Actor("counter", fmt.Sprintf("b%d", i)), src)
	}
	var wg sync.WaitGroup
	written := make([]authority.WriteResult, n)
	for i := range n {
		wg.Go(func() {
			w, err := s.Intend(ctx, authority.IntentRequest{Seen: seen[i], Source: src,
				Intent: authority.Intent{RelocationID: fmt.Sprintf("b%d", i), Target: dst, TargetNode: node("dst"), DeadlineMs: 1, NonceHash: "00"}})
			if err != nil {
				t.Errorf("intent %d: %v", i, err)
			}
			written[i] = w
		})
	}
	wg.Wait()
	for i, w := range written {
		got, err := s.Read(ctx, seen[i].Object)
		if !w.Written || err != nil || got.StoreVersion != w.Snapshot.StoreVersion || got.Record.Intent == nil {
			t.Fatalf("intent %d: %+v; read %+v %v", i, w, got, err)
		}
	}
}

// TestBatchedLocalReads: local reads of a batched Store in flight together
// each answer their own record (or not found), as a read alone does.
func TestBatchedLocalReads(t *testing.T) {
	c, plain := setup(t)
	s := plain.Batched(authority.DefaultLimits())
	a, _ := owner(t, c, "a", 60)
	ctx := context.Background()
	const n = 64
	for i := range n {
		activate(t, s, keyspace.Actor("counter", fmt.Sprintf("r%d", i)), a)
	}
	for round := range 3 {
		var wg sync.WaitGroup
		for i := range n + 8 { // 8 never made
			wg.Go(func() {
				obj := keyspace.Actor("counter", fmt.Sprintf("r%d", i))
				got, err := s.ReadLocal(ctx, obj)
				want, werr := plain.Read(ctx, obj)
				switch {
				case i >= n:
					if !errors.Is(err, authority.ErrNotFound) || !errors.Is(werr, authority.ErrNotFound) {
						t.Errorf("round %d: %s: %v, want not found", round, obj, err)
					}
				case err != nil || werr != nil || got.Object != obj || got.StoreVersion != want.StoreVersion || got.Record.Owner != a:
					t.Errorf("round %d: %s: %+v %v, want %+v", round, obj, got, err, want)
				}
			})
		}
		wg.Wait()
	}
	st := s.BatchStats()
	if st.Reads != 3*(n+8) || st.ReadRequests <= 0 || st.ReadRequests > st.Reads {
		t.Fatalf("batch stats %+v, want %d reads in at most as many requests", st, 3*(n+8))
	}
	t.Logf("%d local reads in %d requests", st.Reads, st.ReadRequests)
	if _, err := s.ReadLocal(ctx, keyspace.Object{}); !errors.Is(err, authority.ErrInvalidRequest) {
		t.Fatalf("an invalid object: %v", err)
	}
}
