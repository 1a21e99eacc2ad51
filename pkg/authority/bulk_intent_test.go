package authority_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
)

// bulkOf builds the bulk intent of snaps moving from src to dst.
func bulkOf(src, dst authority.OwnerRef, deadlineMs int64, snaps ...authority.Snapshot) authority.BulkIntent {
	b := authority.BulkIntent{Source: src, Target: dst, TargetNode: node(dst.ID), DeadlineMs: deadlineMs}
	for i, s := range snaps {
		b.Units = append(b.Units, authority.BulkUnit{Object: s.Object.String(), RelocationID: fmt.Sprintf("r%d-%s", i, s.Object.ID),
			NonceHash: record.HashNonce([]byte(s.Object.ID)), StoreVersion: s.StoreVersion})
	}
	return b
}

// bulkCommit is the commit of unit snap of bulk id read at rev.
func bulkCommit(id string, rev int64, snap authority.Snapshot, relocation string, dst authority.OwnerRef) authority.CommitRequest {
	return authority.CommitRequest{RelocationID: relocation, Participants: []authority.Participant{{Expected: snap}},
		Target: dst, TargetNode: node(dst.ID), Bulk: &authority.BulkFence{ID: id, Revision: rev}}
}

// TestBulkIntent: the one-write rule's transactions against a real etcd.
// The bulk intent is written once, only over records still at their
// sealed versions, by a live source, under a new id, bound to no lease,
// and writes no record; each unit then ends by exactly one of its commit
// (which compares its record's version and the key's) or its preserve;
// deleting the key aborts every commit not yet made.
func TestBulkIntent(t *testing.T) {
	c, s := setup(t)
	src, _ := owner(t, c, "src", 30)
	dst, _ := owner(t, c, "dst", 30)
	ctx := context.Background()
	var snaps []authority.Snapshot
	for i := range 4 {
		snaps = append(snaps, activate(t, s, keyspace.Actor("counter", fmt.Sprintf("b%d", i)), src))
	}

	// Bad requests change nothing.
	bad := map[string]authority.BulkIntent{
		"no objects":      bulkOf(src, dst, 1),
		"a stale source":  bulkOf(authority.OwnerRef{ID: src.ID}, dst, 1, snaps[0]),
		"to itself":       bulkOf(src, src, 1, snaps[0]),
		"an object twice": bulkOf(src, dst, 1, snaps[0], snaps[0]),
		"a group":         bulkOf(src, dst, 1, authority.Snapshot{Object: keyspace.Group("g"), StoreVersion: 1}),
	}
	short := bulkOf(src, dst, 1, snaps[0])
	short.Units[0].NonceHash = "abc"
	bad["a short nonce hash"] = short
	many := make([]authority.Snapshot, authority.BulkUnitsWithin(authority.DefaultLimits())+1)
	for i := range many {
		many[i] = authority.Snapshot{Object: keyspace.Actor("counter", fmt.Sprintf("m%d", i)), StoreVersion: 1}
	}
	bad["too many objects"] = bulkOf(src, dst, 1, many...)
	for what, b := range bad {
		if _, err := s.WriteBulkIntent(ctx, "bad", b); !errors.Is(err, authority.ErrInvalidBulkIntent) {
			t.Errorf("%s: %v", what, err)
		}
	}
	if _, err := s.WriteBulkIntent(ctx, "a/b", bulkOf(src, dst, 1, snaps[0])); !errors.Is(err, authority.ErrInvalidRequest) {
		t.Errorf("a bulk id with a slash: %v", err)
	}
	if all, _ := c.Get(ctx, keys.RelocationsPrefix(), clientv3.WithPrefix()); len(all.Kvs) != 0 {
		t.Fatalf("a refused bulk intent wrote %v", all.Kvs)
	}

	// A source that is not alive writes nothing.
	notAlive := bulkOf(authority.OwnerRef{ID: src.ID, Generation: src.Generation + 1}, dst, 1, snaps...)
	if res, err := s.WriteBulkIntent(ctx, "k0", notAlive); err != nil || res.Written || res.OwnerAlive {
		t.Fatalf("a bulk intent by a source that is not alive: %+v %v", res, err)
	}

	b := bulkOf(src, dst, 1_000_000, snaps...)
	res, err := s.WriteBulkIntent(ctx, "k1", b)
	if err != nil || !res.Written || res.Revision <= snaps[3].StoreVersion {
		t.Fatalf("bulk intent: %+v %v", res, err)
	}
	got, err := c.Get(ctx, keys.Relocation("k1"))
	if err != nil || len(got.Kvs) != 1 || got.Kvs[0].Lease != 0 || got.Kvs[0].ModRevision != res.Revision {
		t.Fatalf("relocations/k1: %v %v (want it bound to no lease, at %d)", got.Kvs, err, res.Revision)
	}
	for _, snap := range snaps {
		if cur, err := s.Read(ctx, snap.Object); err != nil || cur.StoreVersion != snap.StoreVersion {
			t.Fatalf("the bulk intent wrote %s: %+v %v", snap.Object, cur, err)
		}
	}
	// A bulk id is never reused.
	if again, err := s.WriteBulkIntent(ctx, "k1", b); err != nil || again.Written || !again.Exists {
		t.Fatalf("a second bulk intent under k1: %+v %v", again, err)
	}

	read, rev, found, err := s.ReadBulkIntent(ctx, "k1")
	if err != nil || !found || rev != res.Revision || len(read.Units) != 4 || read.Source != src || read.Target != dst {
		t.Fatalf("read back: %+v at %d, %v %v", read, rev, found, err)
	}
	if u, ok := read.Unit(snaps[2].Object.String()); !ok || u.StoreVersion != snaps[2].StoreVersion {
		t.Fatalf("unit of %s: %+v %v", snaps[2].Object, u, ok)
	}
	if _, _, found, err := s.ReadBulkIntent(ctx, "k0"); found || err != nil {
		t.Fatalf("the bulk intent never written: %v %v", found, err)
	}

	// Unit 0 commits; its key stays for the others.
	u0 := read.Units[0]
	if cr, err := s.Commit(ctx, bulkCommit("k1", rev, snaps[0], u0.RelocationID, dst)); err != nil || !cr.Committed {
		t.Fatalf("commit unit 0: %+v %v", cr, err)
	}
	// A lost reply is decided by the record's bytes, as for any commit.
	if rc, err := s.ResolveCommit(ctx, bulkCommit("k1", rev, snaps[0], u0.RelocationID, dst)); err != nil || !rc.Committed {
		t.Fatalf("resolve unit 0's commit: %+v %v", rc, err)
	}
	cur, err := s.Read(ctx, snaps[0].Object)
	if err != nil || cur.Record.Owner != dst || cur.Record.LastRelocation != u0.RelocationID || cur.Record.Intent != nil {
		t.Fatalf("committed unit 0: %+v %v", cur, err)
	}
	if got, _ := c.Get(ctx, keys.Relocation("k1")); len(got.Kvs) != 1 {
		t.Fatal("a unit's commit deleted the bulk's key")
	}
	// Its preserve, late, loses.
	if w, err := s.Preserve(ctx, authority.PreserveRequest{Seen: snaps[0], Source: src, RelocationID: u0.RelocationID}); err != nil || w.Written {
		t.Fatalf("a preserve after the commit: %+v %v", w, err)
	}
	// Unit 1 is preserved first: its commit then loses.
	u1 := read.Units[1]
	if w, err := s.Preserve(ctx, authority.PreserveRequest{Seen: snaps[1], Source: src, RelocationID: u1.RelocationID}); err != nil || !w.Written {
		t.Fatalf("preserve unit 1: %+v %v", w, err)
	}
	cr, err := s.Commit(ctx, bulkCommit("k1", rev, snaps[1], u1.RelocationID, dst))
	if err != nil || cr.Committed {
		t.Fatalf("a commit after the preserve: %+v %v", cr, err)
	}
	// A bulk commit reads nothing on failure in its transaction: what it
	// reports comes from the read after it.
	if got := cr.Records[snaps[1].Object.String()]; got.Record.Owner != src || got.StoreVersion <= snaps[1].StoreVersion || !cr.TargetAlive {
		t.Fatalf("a failed bulk commit's view: %+v (alive %v)", got, cr.TargetAlive)
	}
	// A commit that names another revision of the key fails, and so does
	// one whose record is not the bytes etcd holds (a source that lied
	// about it in its PREPARE).
	u2 := read.Units[2]
	lie := snaps[2]
	lie.Record.Pinned = true
	if cr, err := s.Commit(ctx, bulkCommit("k1", rev, lie, u2.RelocationID, dst)); err != nil || cr.Committed {
		t.Fatalf("a commit of other bytes: %+v %v", cr, err)
	}
	if cr, err := s.Commit(ctx, bulkCommit("k1", rev+1, snaps[2], u2.RelocationID, dst)); err != nil || cr.Committed {
		t.Fatalf("a commit at another revision of the key: %+v %v", cr, err)
	}
	// The whole-bulk abort: only by a live source, at the key's revision;
	// after it no commit of the bulk passes.
	if del, err := s.DeleteBulkIntent(ctx, "k1", rev, authority.OwnerRef{ID: src.ID, Generation: src.Generation + 1}); err != nil || del {
		t.Fatalf("a delete by a source that is not alive: %v %v", del, err)
	}
	if del, err := s.DeleteBulkIntent(ctx, "k1", rev+1, src); err != nil || del {
		t.Fatalf("a delete at another revision: %v %v", del, err)
	}
	if del, err := s.DeleteBulkIntent(ctx, "k1", rev, src); err != nil || !del {
		t.Fatalf("the abort: %v %v", del, err)
	}
	if cr, err := s.Commit(ctx, bulkCommit("k1", rev, snaps[2], u2.RelocationID, dst)); err != nil || cr.Committed {
		t.Fatalf("a commit after the abort: %+v %v", cr, err)
	}
	if cur, err := s.Read(ctx, snaps[2].Object); err != nil || cur.StoreVersion != snaps[2].StoreVersion || cur.Record.Owner != src {
		t.Fatalf("unit 2 after the abort: %+v %v", cur, err)
	}
}

// TestBulkIntentStale: a bulk intent over a record that moved on since
// the seal is not written, and says which object went stale.
func TestBulkIntentStale(t *testing.T) {
	c, s := setup(t)
	src, _ := owner(t, c, "src", 30)
	dst, _ := owner(t, c, "dst", 30)
	ctx := context.Background()
	a := activate(t, s, keyspace.Actor("counter", "a"), src)
	z := activate(t, s, keyspace.Actor("counter", "z"), src)
	if w, err := s.Preserve(ctx, authority.PreserveRequest{Seen: z, Source: src, RelocationID: "other"}); err != nil || !w.Written {
		t.Fatalf("rewrite z: %+v %v", w, err)
	}
	res, err := s.WriteBulkIntent(ctx, "k", bulkOf(src, dst, 1, a, z))
	if err != nil || res.Written || !res.OwnerAlive || res.Exists || len(res.Stale) != 1 || res.Stale[0] != z.Object.String() {
		t.Fatalf("a bulk intent over a stale record: %+v %v", res, err)
	}
	if got, _ := c.Get(ctx, keys.Relocation("k")); len(got.Kvs) != 0 {
		t.Fatal("written anyway")
	}
}

// TestBulkCommitRefused: a bulk unit's commit is held to its form before
// anything is sent.
func TestBulkCommitRefused(t *testing.T) {
	c, s := setup(t)
	src, _ := owner(t, c, "src", 30)
	dst, _ := owner(t, c, "dst", 30)
	a := activate(t, s, keyspace.Actor("counter", "a"), src)
	relocating := a
	relocating.Record.State, relocating.Record.Intent = authority.StateRelocating, &authority.Intent{RelocationID: "r", Target: dst}
	two := bulkCommit("k", 5, a, "r", dst)
	two.Participants = append(two.Participants, authority.Participant{Expected: activate(t, s, keyspace.Actor("counter", "b"), src)})
	for what, req := range map[string]authority.CommitRequest{
		"a record with an intent": bulkCommit("k", 5, relocating, "r", dst),
		"two objects":             two,
		"no key revision":         bulkCommit("k", 0, a, "r", dst),
		"the target's own record": bulkCommit("k", 5, a, "r", src),
	} {
		if _, err := s.Commit(context.Background(), req); !errors.Is(err, authority.ErrInvalidRequest) && !errors.Is(err, authority.ErrNotIntended) {
			t.Errorf("%s: %v", what, err)
		}
	}
}

// TestSweepBulkIntents: the sweep deletes the bulk intents whose deadline
// and grace passed, whoever wrote them, and nothing else of relocations/.
func TestSweepBulkIntents(t *testing.T) {
	c, s := setup(t)
	src, lid := owner(t, c, "src", 30)
	dst, _ := owner(t, c, "dst", 30)
	ctx := context.Background()
	a := activate(t, s, keyspace.Actor("counter", "a"), src)
	for id, deadline := range map[string]int64{"old": 1_000, "new": 9_000} {
		if res, err := s.WriteBulkIntent(ctx, id, bulkOf(src, dst, deadline, a)); err != nil || !res.Written {
			t.Fatalf("bulk intent %s: %+v %v", id, res, err)
		}
	}
	if err := s.ListBulk(ctx, "listing", authority.BulkListing{Source: src, Target: dst, Objects: 1}, lid); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, keys.Relocation("corrupt"), `{"kind":"bulk-intent","units":7}`); err != nil {
		t.Fatal(err)
	}
	swept, bad, err := s.SweepBulkIntents(ctx, 5_000, 1_000)
	if err != nil || swept != 1 || bad != 1 {
		t.Fatalf("sweep: %d swept, %d bad, %v", swept, bad, err)
	}
	all, _ := c.Get(ctx, keys.RelocationsPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	var left []string
	for _, kv := range all.Kvs {
		left = append(left, strings.TrimPrefix(string(kv.Key), keys.RelocationsPrefix()))
	}
	if strings.Join(left, ",") != "corrupt,listing,new,new/fence" {
		t.Fatalf("left after the sweep: %v", left)
	}
}
