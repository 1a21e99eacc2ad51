package authority_test

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// A Recover with a Guard writes only while the guard key exists with its
// CreateRevision (a recovery controller's election key): a deposed
// controller writes nothing, and is told why.
func TestRecoverGuard(t *testing.T) {
	c, s := setup(t)
	dead, lid := owner(t, c, "n1", 30)
	live, _ := owner(t, c, "n2", 30)
	ctx := context.Background()
	a := activate(t, s, keyspace.Actor("counter", "a"), dead)
	b := activate(t, s, keyspace.Actor("counter", "b"), dead)
	if _, err := c.Revoke(ctx, lid); err != nil {
		t.Fatal(err)
	}
	const gk = "/meshloc/default/controllers/recovery/guard"
	put, err := c.Put(ctx, gk, "me")
	if err != nil {
		t.Fatal(err)
	}
	held := &authority.Guard{Key: gk, CreateRevision: put.Header.Revision}

	r, err := s.Recover(ctx, authority.RecoverRequest{Seen: a, NewOwner: live, Node: node("n2"), Guard: held})
	if err != nil || !r.Written || r.GuardLost || r.Snapshot.Record.Owner != live {
		t.Fatalf("recover under a held guard: %+v %v", r, err)
	}

	// The guard is gone (the election was lost): nothing is written.
	if _, err := c.Delete(ctx, gk); err != nil {
		t.Fatal(err)
	}
	r, err = s.Recover(ctx, authority.RecoverRequest{Seen: b, NewOwner: live, Node: node("n2"), Guard: held})
	if err != nil || r.Written || !r.GuardLost || !r.Found || r.Snapshot.Record.Owner != dead {
		t.Fatalf("recover under a lost guard: %+v %v", r, err)
	}
	// Re-created (another term): still not ours.
	if _, err := c.Txn(ctx).Then(clientv3.OpPut(gk, "other")).Commit(); err != nil {
		t.Fatal(err)
	}
	r, err = s.Recover(ctx, authority.RecoverRequest{Seen: b, NewOwner: live, Node: node("n2"), Guard: held})
	if err != nil || r.Written || !r.GuardLost {
		t.Fatalf("recover under a re-created guard: %+v %v", r, err)
	}
	// Batched, every recovery of a lost guard is refused, and says so.
	var reqs []authority.RecoverRequest
	for _, seen := range []authority.Snapshot{b, activate(t, s, keyspace.Actor("counter", "c"), live)} {
		reqs = append(reqs, authority.RecoverRequest{Seen: seen, NewOwner: live, Node: node("n2"), Guard: held})
	}
	reqs[1].Seen.Record.Owner = dead // as if seen while the dead owner had it
	res, errs := s.Batched(authority.DefaultLimits()).RecoverMany(ctx, reqs)
	for i, r := range res {
		if errs[i] != nil || r.Written || !r.GuardLost {
			t.Fatalf("batched recover %d under a lost guard: %+v %v", i, r, errs[i])
		}
	}
	got, err := s.Read(ctx, b.Object)
	if err != nil || got.StoreVersion != b.StoreVersion {
		t.Fatalf("a refused recover changed the record: %+v %v", got, err)
	}
}
