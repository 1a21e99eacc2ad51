package authority_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// TestBulkListing: a bulk move is listed once, under its own
// relocations/<id> bound to the source's lease, written and deleted only
// while the source is alive; its units' intents write no key of their
// own, and their commits still clear their records.
func TestBulkListing(t *testing.T) {
	c, s := setup(t)
	src, lid := owner(t, c, "src", 30)
	dst, _ := owner(t, c, "dst", 30)
	ctx := context.Background()
	if err := s.ListBulk(ctx, "", authority.BulkListing{}, lid); !errors.Is(err, authority.ErrInvalidRequest) {
		t.Fatalf("a listing without an id: %v", err)
	}
	stale := authority.OwnerRef{ID: src.ID, Generation: src.Generation + 1}
	if err := s.ListBulk(ctx, "bulk0", authority.BulkListing{Source: stale, Target: dst, Objects: 2}, lid); !errors.Is(err, authority.ErrOwnerNotAlive) {
		t.Fatalf("a listing by a source that is not alive: %v", err)
	}
	if err := s.ListBulk(ctx, "bulk1", authority.BulkListing{Source: src, Target: dst, Objects: 2, StartedUnixMs: 5}, lid); err != nil {
		t.Fatal(err)
	}
	var ps []authority.Participant
	for _, id := range []string{"u1", "u2"} {
		seen := activate(t, s, keyspace.Actor("counter", id), src)
		w, err := s.Intend(ctx, authority.IntentRequest{Seen: seen, Source: src, LeaseID: lid, Unlisted: true,
			Intent: authority.Intent{RelocationID: id, Target: dst, TargetNode: node("dst"), DeadlineMs: 1}})
		if err != nil || !w.Written {
			t.Fatalf("intend %s: %+v %v", id, w, err)
		}
		ps = append(ps, authority.Participant{Expected: w.Snapshot})
	}
	all, err := c.Get(ctx, keys.RelocationsPrefix(), clientv3.WithPrefix())
	if err != nil || len(all.Kvs) != 1 || string(all.Kvs[0].Key) != keys.Relocation("bulk1") || all.Kvs[0].Lease != int64(lid) {
		t.Fatalf("relocations/ holds %v (%v), want only the bulk's, on the source's lease", all.Kvs, err)
	}
	var l authority.BulkListing
	if err := json.Unmarshal(all.Kvs[0].Value, &l); err != nil || !l.Bulk || l.Objects != 2 || l.Source != src || l.Target != dst {
		t.Fatalf("listing %s: %+v %v", all.Kvs[0].Value, l, err)
	}
	for i, id := range []string{"u1", "u2"} {
		res, err := s.Commit(ctx, authority.CommitRequest{RelocationID: id, Participants: ps[i : i+1], Target: dst, TargetNode: node("dst")})
		if err != nil || !res.Committed {
			t.Fatalf("commit %s: %+v %v", id, res, err)
		}
	}
	if err := s.UnlistBulk(ctx, "bulk1", stale); !errors.Is(err, authority.ErrOwnerNotAlive) {
		t.Fatalf("an unlisting by a source that is not alive: %v", err)
	}
	if err := s.UnlistBulk(ctx, "bulk1", src); err != nil {
		t.Fatal(err)
	}
	if all, _ := c.Get(ctx, keys.RelocationsPrefix(), clientv3.WithPrefix()); len(all.Kvs) != 0 {
		t.Fatalf("relocations/ left: %v", all.Kvs)
	}
}
