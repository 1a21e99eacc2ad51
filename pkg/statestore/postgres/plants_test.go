//go:build failpoints

package postgres

import (
	"context"
	"testing"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/pgtest"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/statestore"
)

// The planted bugs do what they say: an unfenced write lands over a newer
// owner's claim; a load before its claim misses a write that lands in
// between.
func TestPlants(t *testing.T) {
	if unfencedSQL == persistSQL {
		t.Fatal("the unfenced statement is the fenced one")
	}
	ctx := context.Background()
	auth := authority.New(etcdtest.Client(t, etcdtest.Single(t).Endpoint()), keyspace.Default())
	s, err := Open(ctx, pgtest.Start(t).NewDatabase(t), auth)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	obj := keyspace.Actor("dcounter", "planted")
	f := func(ag int64) authority.Fence {
		return authority.Fence{Owner: authority.OwnerRef{ID: "n1", Generation: 3}, ObjectGeneration: 1, AuthorityGeneration: ag}
	}
	write := func(fe authority.Fence, version int64, seq uint64, state string, unfenced bool) authority.PersistResult {
		v := authority.StateValue{V: authority.StateVersion1, Object: obj.String(), ObjectGeneration: 1, AuthorityGeneration: fe.AuthorityGeneration,
			Owner: fe.Owner, Seq: seq, State: []byte(state), ReplyWindowMs: 1000, ReplyMaxEntries: 8}
		req := authority.PersistRequest{Object: obj, Fence: fe, StoreVersion: 1, StateVersion: version, Value: v.Encode(), State: &v}
		persist := s.Persist
		if unfenced {
			persist = s.PersistUnfenced
		}
		res, err := persist(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	rd, err := s.Load(ctx, statestore.Claim{Object: obj, Fence: f(1), Fresh: true})
	if err != nil {
		t.Fatal(err)
	}
	old := rd.StateVersion
	if _, err := s.Load(ctx, statestore.Claim{Object: obj, Fence: f(2)}); err != nil {
		t.Fatal(err)
	}
	if res := write(f(1), old, 1, "stale", true); res.Outcome != authority.PersistWritten {
		t.Fatalf("unfenced write over a newer claim: %+v", res)
	}
	rd, err = s.LoadBeforeClaim(ctx, statestore.Claim{Object: obj, Fence: f(3)}, func() {
		if res := write(f(2), 0, 2, "between", true); res.Outcome != authority.PersistWritten {
			t.Errorf("write between: %+v", res)
		}
	})
	if err != nil || string(rd.Value.State) != "stale" {
		t.Fatalf("load before claim: %q %v, want the state from before the write between", rd.Value.State, err)
	}
}
