package authority_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/tcpproxy"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var keys = keyspace.Default()

// owner creates a lease-bound owner key, as pkg/lease does, and returns its
// pair and lease.
func owner(t *testing.T, c *clientv3.Client, id string, ttl int64) (authority.OwnerRef, clientv3.LeaseID) {
	t.Helper()
	ctx := context.Background()
	g, err := c.Grant(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	k := keys.Owner(id)
	resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, `{"ownerId":"`+id+`"}`, clientv3.WithLease(g.ID))).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("owner %s: %v %v", id, err, resp)
	}
	return authority.OwnerRef{ID: id, Generation: resp.Header.Revision}, g.ID
}

func node(id string) authority.NodeRef {
	return authority.NodeRef{RoutingID: fmt.Sprintf("%032x", len(id)), Address: id + ":7100"}
}

func setup(t *testing.T) (*clientv3.Client, *authority.Store) {
	srv := etcdtest.Single(t)
	c := etcdtest.Client(t, srv.Endpoint())
	return c, authority.New(c, keys)
}

func activate(t *testing.T, s *authority.Store, obj keyspace.Object, o authority.OwnerRef) authority.Snapshot {
	t.Helper()
	res, err := s.Activate(context.Background(), authority.ActivateRequest{Object: obj, Owner: o, Node: node(o.ID)})
	if err != nil || !res.Won {
		t.Fatalf("activate %s: %v %+v", obj, err, res)
	}
	return res.Snapshot
}

func TestActivateRace16(t *testing.T) {
	c, s := setup(t)
	owners := make([]authority.OwnerRef, 16)
	for i := range owners {
		owners[i], _ = owner(t, c, fmt.Sprintf("n%d", i), 30)
	}
	obj := keyspace.Actor("counter", "race")
	results := make([]authority.ActivateResult, 16)
	errs := make([]error, 16)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 16 {
		wg.Go(func() {
			<-start
			results[i], errs[i] = s.Activate(context.Background(), authority.ActivateRequest{Object: obj, Owner: owners[i], Node: node(owners[i].ID)})
		})
	}
	close(start)
	wg.Wait()
	winners := 0
	var winner authority.Snapshot
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("activate %d: %v", i, errs[i])
		}
		if r.Won {
			winners++
			winner = r.Snapshot
		}
	}
	if winners != 1 {
		t.Fatalf("winners = %d, want 1", winners)
	}
	for i, r := range results {
		if r.Snapshot.Record.Owner != winner.Record.Owner || r.Snapshot.StoreVersion != winner.StoreVersion {
			t.Errorf("caller %d sees %v@%d, winner is %v@%d", i, r.Snapshot.Record.Owner, r.Snapshot.StoreVersion, winner.Record.Owner, winner.StoreVersion)
		}
	}
	got, err := s.Read(context.Background(), obj)
	if err != nil || got.Record.Owner != winner.Record.Owner || got.Record.ObjectGeneration != 1 || got.Record.AuthorityGeneration != 1 {
		t.Fatalf("read %+v %v", got, err)
	}
}

func TestActivateDeadOwnerRefused(t *testing.T) {
	c, s := setup(t)
	o, lid := owner(t, c, "n1", 30)
	if _, err := c.Revoke(context.Background(), lid); err != nil {
		t.Fatal(err)
	}
	_, err := s.Activate(context.Background(), authority.ActivateRequest{Object: keyspace.Actor("counter", "x"), Owner: o, Node: node("n1")})
	if !errors.Is(err, authority.ErrOwnerNotAlive) {
		t.Fatalf("err = %v, want ErrOwnerNotAlive", err)
	}
	if _, err := s.Read(context.Background(), keyspace.Actor("counter", "x")); !errors.Is(err, authority.ErrNotFound) {
		t.Fatalf("record written by a dead owner: %v", err)
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	c, s := setup(t)
	o, _ := owner(t, c, "n1", 30)
	ctx := context.Background()
	before, _ := c.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	cases := []error{}
	_, err := s.Activate(ctx, authority.ActivateRequest{Object: keyspace.Object{Kind: "actor", Type: "a/b", ID: "x"}, Owner: o})
	cases = append(cases, err)
	_, err = s.Activate(ctx, authority.ActivateRequest{Object: keyspace.Actor("counter", "x"), Owner: authority.OwnerRef{ID: "n1"}})
	cases = append(cases, err)
	_, err = s.Commit(ctx, authority.CommitRequest{RelocationID: "r", Target: o})
	cases = append(cases, err)
	_, err = s.Read(ctx, keyspace.Object{Kind: "thing", ID: "x"})
	cases = append(cases, err)
	_, _, err = s.List(ctx, authority.ListOptions{Kind: "thing"})
	cases = append(cases, err)
	for i, err := range cases {
		if !errors.Is(err, authority.ErrInvalidRequest) {
			t.Errorf("case %d: err = %v, want ErrInvalidRequest", i, err)
		}
	}
	after, _ := c.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if after.Header.Revision != before.Header.Revision {
		t.Fatalf("bad input changed etcd: revision %d → %d", before.Header.Revision, after.Header.Revision)
	}
}

// racePair activates obj on src, writes an intent to dst under relocation
// id, then runs dst's commit and src's preserve at the same time.
func racePair(t *testing.T, s *authority.Store, obj keyspace.Object, src, dst authority.OwnerRef, id string) (authority.CommitResult, authority.WriteResult, error, error) {
	t.Helper()
	ctx := context.Background()
	seen := intend(t, s, activate(t, s, obj, src), src, 0, dst, id)
	var cres authority.CommitResult
	var pres authority.WriteResult
	var cerr, perr error
	var wg sync.WaitGroup
	wg.Go(func() {
		cres, cerr = s.Commit(ctx, authority.CommitRequest{RelocationID: id,
			Participants: []authority.Participant{{Expected: seen}}, Target: dst, TargetNode: node("dst")})
	})
	wg.Go(func() {
		pres, perr = s.Preserve(ctx, authority.PreserveRequest{Seen: seen, Source: src, RelocationID: id})
	})
	wg.Wait()
	return cres, pres, cerr, perr
}

// doc: docs/design.md §3 — exactly one of commit and preserve wins.
func TestCommitPreserveRace200(t *testing.T) {
	c, s := setup(t)
	src, _ := owner(t, c, "src", 60)
	dst, _ := owner(t, c, "dst", 60)
	ctx := context.Background()
	for i := range 200 {
		obj := keyspace.Actor("counter", fmt.Sprintf("o%d", i))
		cres, pres, cerr, perr := racePair(t, s, obj, src, dst, fmt.Sprintf("r%d", i))
		if cerr != nil || perr != nil {
			t.Fatalf("iteration %d: commit %v preserve %v", i, cerr, perr)
		}
		if cres.Committed == pres.Written {
			t.Fatalf("iteration %d: committed=%v preserved=%v, want exactly one", i, cres.Committed, pres.Written)
		}
		got, _ := s.Read(ctx, obj)
		wantOwner := src
		if cres.Committed {
			wantOwner = dst
			if got.Record.AuthorityGeneration != 2 || got.Record.ObjectGeneration != 1 {
				t.Fatalf("committed record %+v", got.Record)
			}
		}
		if got.Record.Owner != wantOwner {
			t.Fatalf("iteration %d: owner %v, want %v", i, got.Record.Owner, wantOwner)
		}
	}
}

func TestCommitToDeadTargetFails(t *testing.T) {
	c, s := setup(t)
	src, _ := owner(t, c, "src", 30)
	dst, lid := owner(t, c, "dst", 30)
	obj := keyspace.Actor("counter", "c")
	seen := intend(t, s, activate(t, s, obj, src), src, 0, dst, "r1")
	if _, err := c.Revoke(context.Background(), lid); err != nil {
		t.Fatal(err)
	}
	res, err := s.Commit(context.Background(), authority.CommitRequest{RelocationID: "r1",
		Participants: []authority.Participant{{Expected: seen}}, Target: dst, TargetNode: node("dst")})
	if err != nil || res.Committed || res.TargetAlive {
		t.Fatalf("commit to dead target: %+v %v", res, err)
	}
	if cur := res.Records[obj.String()]; cur.Record.Owner != src || cur.StoreVersion != seen.StoreVersion {
		t.Fatalf("failed commit must return the current record, got %+v", cur)
	}
	// A restarted target (same id, new generation) is another owner: still refused.
	dst2, _ := owner(t, c, "dst", 30)
	res, err = s.Commit(context.Background(), authority.CommitRequest{RelocationID: "r1",
		Participants: []authority.Participant{{Expected: seen}}, Target: dst, TargetNode: node("dst")})
	if err != nil || res.Committed {
		t.Fatalf("commit naming the old generation of a restarted target: %+v %v", res, err)
	}
	if dst2.Generation <= dst.Generation {
		t.Fatalf("owner generation did not grow: %d → %d", dst.Generation, dst2.Generation)
	}
}

func TestPreserveBySourceWithoutLeaseFails(t *testing.T) {
	c, s := setup(t)
	src, lid := owner(t, c, "src", 30)
	obj := keyspace.Actor("counter", "c")
	seen := activate(t, s, obj, src)
	if _, err := c.Revoke(context.Background(), lid); err != nil {
		t.Fatal(err)
	}
	res, err := s.Preserve(context.Background(), authority.PreserveRequest{Seen: seen, Source: src, RelocationID: "r1"})
	if err != nil || res.Written || res.OwnerAlive {
		t.Fatalf("preserve without lease: %+v %v", res, err)
	}
}

func TestGroupCommitAllOrNothing(t *testing.T) {
	c, s := setup(t)
	src, _ := owner(t, c, "src", 30)
	dst, _ := owner(t, c, "dst", 30)
	var ps []authority.Participant
	for i := range 5 {
		seen := activate(t, s, keyspace.Actor("counter", fmt.Sprintf("m%d", i)), src)
		ps = append(ps, authority.Participant{Expected: intend(t, s, seen, src, 0, dst, "g1")})
	}
	// One member moved on (its record changed): nothing commits.
	if _, err := s.Preserve(context.Background(), authority.PreserveRequest{Seen: ps[3].Expected, Source: src, RelocationID: "g1"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Commit(context.Background(), authority.CommitRequest{RelocationID: "g1", Participants: ps, Target: dst, TargetNode: node("dst")})
	if err != nil || res.Committed {
		t.Fatalf("%+v %v", res, err)
	}
	all, _, _ := s.List(context.Background(), authority.ListOptions{Owner: "dst"})
	if len(all) != 0 {
		t.Fatalf("partial group commit: %d records on dst", len(all))
	}
	ps[3].Expected = res.Records[ps[3].Expected.Object.String()]
	for i := range ps { // a second attempt writes its own intent on every record
		ps[i].Expected = intend(t, s, ps[i].Expected, src, 0, dst, "g2")
	}
	res, err = s.Commit(context.Background(), authority.CommitRequest{RelocationID: "g2", Participants: ps, Target: dst, TargetNode: node("dst")})
	if err != nil || !res.Committed {
		t.Fatalf("%+v %v", res, err)
	}
	all, _, _ = s.List(context.Background(), authority.ListOptions{Owner: "dst"})
	if len(all) != 5 {
		t.Fatalf("group commit moved %d of 5", len(all))
	}
}

// intend writes relocation id's intent naming target on seen (owned by
// src; lid binds relocations/<id>, 0: no lease) and returns the record
// after it: what a commit of that relocation expects.
func intend(t *testing.T, s *authority.Store, seen authority.Snapshot, src authority.OwnerRef, lid clientv3.LeaseID, target authority.OwnerRef, id string) authority.Snapshot {
	t.Helper()
	w, err := s.Intend(context.Background(), authority.IntentRequest{Seen: seen, Source: src, LeaseID: lid,
		Intent: authority.Intent{RelocationID: id, Target: target, TargetNode: node(target.ID), DeadlineMs: 1, NonceHash: "00"}})
	if err != nil || !w.Written {
		t.Fatalf("intend %s on %s: %+v %v", id, seen.Object, w, err)
	}
	return w.Snapshot
}

// A commit whose reply is lost is recognised by reading back exactly the
// planned record; a refused one is recognised as not committed.
func TestCommitReplyLostResolvedByReadBack(t *testing.T) {
	srv := etcdtest.Single(t)
	direct := etcdtest.Client(t, srv.Endpoint())
	px, err := tcpproxy.New("127.0.0.1:0", srv.Endpoint()[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	viaProxy := etcdtest.Client(t, "http://"+px.Addr())
	s := authority.New(direct, keys)
	sp := authority.New(viaProxy, keys)
	src, _ := owner(t, direct, "src", 60)
	dst, _ := owner(t, direct, "dst", 60)

	for _, tc := range []struct {
		name       string
		stale      bool
		wantCommit bool
	}{{"committed", false, true}, {"refused", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			obj := keyspace.Actor("counter", tc.name)
			seen := intend(t, s, activate(t, s, obj, src), src, 0, dst, "r-"+tc.name)
			req := authority.CommitRequest{RelocationID: "r-" + tc.name, Participants: []authority.Participant{{Expected: seen}}, Target: dst, TargetNode: node("dst")}
			if tc.stale {
				req.Participants[0].Expected.Record.Intent.DeadlineMs++ // other bytes: the compare fails
			}
			// Warm the proxied connection, then drop every reply.
			if _, err := sp.Read(context.Background(), obj); err != nil {
				t.Fatal(err)
			}
			px.SetMode(tcpproxy.DropReplies)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			_, err := sp.Commit(ctx, req)
			cancel()
			if !errors.Is(err, authority.ErrUncertain) {
				t.Fatalf("lost reply: err = %v, want ErrUncertain", err)
			}
			px.SetMode(tcpproxy.Forward)
			px.ResetConns()
			var res authority.CommitResult
			for range 50 { // the proxied client reconnects
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				res, err = sp.ResolveCommit(ctx, req)
				cancel()
				if err == nil {
					break
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Committed != tc.wantCommit || !res.Resolved {
				t.Fatalf("resolved %+v, want committed=%v", res, tc.wantCommit)
			}
			got, _ := s.Read(context.Background(), obj)
			if (got.Record.Owner == dst) != tc.wantCommit {
				t.Fatalf("etcd says owner %v", got.Record.Owner)
			}
		})
	}
}

func TestIntentAndPreserve(t *testing.T) {
	c, s := setup(t)
	src, lid := owner(t, c, "src", 30)
	dst, _ := owner(t, c, "dst", 30)
	obj := keyspace.Actor("counter", "c")
	seen := activate(t, s, obj, src)
	ctx := context.Background()
	w, err := s.Intend(ctx, authority.IntentRequest{Seen: seen, Source: src, LeaseID: lid,
		Intent: authority.Intent{RelocationID: "r1", Target: dst, TargetNode: node("dst"), DeadlineMs: 1}})
	if err != nil || !w.Written || w.Snapshot.Record.State != authority.StateRelocating {
		t.Fatalf("intend: %+v %v", w, err)
	}
	rk, _ := c.Get(ctx, keys.Relocation("r1"))
	if len(rk.Kvs) != 1 || rk.Kvs[0].Lease != int64(lid) {
		t.Fatalf("relocation key not bound to the source lease: %+v", rk.Kvs)
	}
	// A commit from the pre-intent record names no intent: refused, unsent.
	res, err := s.Commit(ctx, authority.CommitRequest{RelocationID: "r1", Participants: []authority.Participant{{Expected: seen}}, Target: dst})
	if !errors.Is(err, authority.ErrInvalidRequest) || !errors.Is(err, authority.ErrNotIntended) || res.Committed {
		t.Fatalf("commit without intent: %+v %v", res, err)
	}
	p, err := s.Preserve(ctx, authority.PreserveRequest{Seen: w.Snapshot, Source: src, RelocationID: "r1"})
	if err != nil || !p.Written || p.Snapshot.Record.State != authority.StateActive || p.Snapshot.Record.Intent != nil {
		t.Fatalf("preserve: %+v %v", p, err)
	}
	if p.Snapshot.Record.AuthorityGeneration != seen.Record.AuthorityGeneration || p.Snapshot.StoreVersion <= w.Snapshot.StoreVersion {
		t.Fatalf("preserve must keep generations and bump the store version: %+v", p.Snapshot)
	}
	rk, _ = c.Get(ctx, keys.Relocation("r1"))
	if len(rk.Kvs) != 0 {
		t.Fatal("relocation key left after preserve")
	}
}

func TestRecoverOrphan(t *testing.T) {
	c, s := setup(t)
	dead, lid := owner(t, c, "n1", 30)
	live, _ := owner(t, c, "n2", 30)
	obj := keyspace.Actor("counter", "c")
	seen := activate(t, s, obj, dead)
	ctx := context.Background()
	// Not orphaned while its owner lives.
	r, err := s.Recover(ctx, authority.RecoverRequest{Seen: seen, NewOwner: live, Node: node("n2")})
	if err != nil || r.Written || !r.OwnerAlive {
		t.Fatalf("recover of a live object: %+v %v", r, err)
	}
	if _, err := c.Revoke(ctx, lid); err != nil {
		t.Fatal(err)
	}
	v, _ := s.ReadMany(ctx, []keyspace.Object{obj}, []string{"n1"})
	if !authority.Orphaned(v.Objects[obj.String()].Record, v) {
		t.Fatal("object of a revoked owner not orphaned")
	}
	r, err = s.Recover(ctx, authority.RecoverRequest{Seen: seen, NewOwner: live, Node: node("n2")})
	if err != nil || !r.Written {
		t.Fatalf("recover: %+v %v", r, err)
	}
	if r.Snapshot.Record.ObjectGeneration != 2 || r.Snapshot.Record.AuthorityGeneration != 2 || r.Snapshot.Record.Owner != live {
		t.Fatalf("recovered record %+v", r.Snapshot.Record)
	}
	// A second recover from the same snapshot loses (the store version moved).
	r, err = s.Recover(ctx, authority.RecoverRequest{Seen: seen, NewOwner: live, Node: node("n2")})
	if err != nil || r.Written {
		t.Fatalf("double recover: %+v %v", r, err)
	}
}

func TestReadManyOneRevision(t *testing.T) {
	c, s := setup(t)
	o, _ := owner(t, c, "n1", 30)
	a := activate(t, s, keyspace.Actor("counter", "a"), o)
	b := activate(t, s, keyspace.Group("g"), o)
	v, err := s.ReadMany(context.Background(), []keyspace.Object{a.Object, b.Object, keyspace.Actor("counter", "missing")}, []string{"n1", "n9"})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Objects) != 2 || !v.Alive(o) || v.Alive(authority.OwnerRef{ID: "n9", Generation: 1}) || v.Revision < b.StoreVersion {
		t.Fatalf("view %+v", v)
	}
	for _, snap := range v.Objects {
		if snap.Revision != v.Revision {
			t.Fatalf("snapshot at revision %d in a view at %d", snap.Revision, v.Revision)
		}
	}
}

// A commit ends the relocation: the record loses its intent and the
// relocations/<id> key is deleted in the same transaction.
func TestCommitClearsIntent(t *testing.T) {
	c, s := setup(t)
	src, lid := owner(t, c, "src", 30)
	dst, _ := owner(t, c, "dst", 30)
	obj := keyspace.Actor("counter", "c")
	seen := activate(t, s, obj, src)
	ctx := context.Background()
	w, err := s.Intend(ctx, authority.IntentRequest{Seen: seen, Source: src, LeaseID: lid,
		Intent: authority.Intent{RelocationID: "r9", Target: dst, TargetNode: node("dst"), DeadlineMs: 1}})
	if err != nil || !w.Written {
		t.Fatal(w, err)
	}
	res, err := s.Commit(ctx, authority.CommitRequest{RelocationID: "r9", Participants: []authority.Participant{{Expected: w.Snapshot}}, Target: dst, TargetNode: node("dst")})
	if err != nil || !res.Committed {
		t.Fatal(res, err)
	}
	got, _ := s.Read(ctx, obj)
	if got.Record.Intent != nil || got.Record.State != authority.StateActive || got.Record.Owner != dst {
		t.Fatalf("committed record %+v", got.Record)
	}
	if rk, _ := c.Get(ctx, keys.Relocation("r9")); len(rk.Kvs) != 0 {
		t.Fatal("relocations key left after commit")
	}
}
