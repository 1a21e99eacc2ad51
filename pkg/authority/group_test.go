package authority_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

func read(t *testing.T, s *authority.Store, obj keyspace.Object) authority.Snapshot {
	t.Helper()
	snap, err := s.Read(context.Background(), obj)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// consistent asserts the group's members and the members' Group agree.
func consistent(t *testing.T, s *authority.Store, g keyspace.Object, want ...string) {
	t.Helper()
	gs := read(t, s, g)
	if !slices.Equal(gs.Record.Members, want) {
		t.Fatalf("%s members %v, want %v", g, gs.Record.Members, want)
	}
	for _, m := range want {
		o, _ := keyspace.ParseObject(m)
		ms := read(t, s, o)
		if ms.Record.Group != g.String() || ms.Record.Owner != gs.Record.Owner {
			t.Fatalf("%s: group %q owner %v; group %s owner %v", m, ms.Record.Group, ms.Record.Owner, g, gs.Record.Owner)
		}
	}
}

func TestGroupMembership(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	n1, _ := owner(t, c, "n1", 30)
	n2, _ := owner(t, c, "n2", 30)
	g := keyspace.Group("g1")
	gs := activate(t, s, g, n1)
	if gs.Record.Kind != keyspace.KindGroup || len(gs.Record.Members) != 0 {
		t.Fatalf("group record %+v", gs.Record)
	}
	a := keyspace.Actor("counter", "a")
	as := activate(t, s, a, n1)

	// Join an existing actor: both records in one transaction.
	res, err := s.Join(ctx, authority.MembershipRequest{Group: gs, Actor: a, ActorSeen: &as, Owner: n1, Node: node("n1")})
	if err != nil || !res.Written || res.Group.StoreVersion != res.Actor.StoreVersion {
		t.Fatalf("join: %v %+v", err, res)
	}
	consistent(t, s, g, a.String())

	// Join an actor that has no record: created as a member.
	b := keyspace.Actor("counter", "b")
	gs = read(t, s, g)
	res, err = s.Join(ctx, authority.MembershipRequest{Group: gs, Actor: b, Owner: n1, Node: node("n1")})
	if err != nil || !res.Written || res.Actor.Record.ObjectGeneration != 1 || res.Actor.Record.Group != g.String() {
		t.Fatalf("join new: %v %+v", err, res)
	}
	consistent(t, s, g, a.String(), b.String())

	// Bad input and refusals change nothing.
	before := read(t, s, g)
	as = read(t, s, a)
	cases := []struct {
		name string
		req  authority.MembershipRequest
		want error
		join bool
	}{
		{"join twice", authority.MembershipRequest{Group: before, Actor: a, ActorSeen: &as, Owner: n1}, authority.ErrAlreadyMember, true},
		{"join by another owner", authority.MembershipRequest{Group: before, Actor: keyspace.Actor("counter", "c"), Owner: n2}, authority.ErrNotGroupOwner, true},
		{"join a group", authority.MembershipRequest{Group: before, Actor: keyspace.Group("g2"), Owner: n1}, authority.ErrInvalidRequest, true},
		{"leave a non-member", authority.MembershipRequest{Group: before, Actor: keyspace.Actor("counter", "c"), Owner: n1}, authority.ErrNotMember, false},
		{"leave by another owner", authority.MembershipRequest{Group: before, Actor: a, ActorSeen: &as, Owner: n2}, authority.ErrNotGroupOwner, false},
	}
	for _, tc := range cases {
		var err error
		if tc.join {
			_, err = s.Join(ctx, tc.req)
		} else {
			_, err = s.Leave(ctx, tc.req)
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if after := read(t, s, g); after.StoreVersion != before.StoreVersion {
		t.Fatalf("a refused request wrote the group: %d → %d", before.StoreVersion, after.StoreVersion)
	}

	// A stale group version: not written, the current records come back.
	stale := gs
	res, err = s.Leave(ctx, authority.MembershipRequest{Group: stale, Actor: a, ActorSeen: &as, Owner: n1})
	if err != nil || res.Written || !res.GroupFound || res.Group.StoreVersion != before.StoreVersion {
		t.Fatalf("stale leave: %v %+v", err, res)
	}

	// Leave.
	res, err = s.Leave(ctx, authority.MembershipRequest{Group: before, Actor: a, ActorSeen: &as, Owner: n1})
	if err != nil || !res.Written || res.Actor.Record.Group != "" {
		t.Fatalf("leave: %v %+v", err, res)
	}
	consistent(t, s, g, b.String())
}

// A group moves with one intent, one commit (and a preserve) over every
// participant: all or nothing.
func TestGroupIntentCommitPreserve(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	n1, lease1 := owner(t, c, "n1", 30)
	n2, _ := owner(t, c, "n2", 30)
	g := keyspace.Group("g")
	activate(t, s, g, n1)
	var names []string
	for i := range 3 {
		m := keyspace.Actor("counter", fmt.Sprintf("m%d", i))
		res, err := s.Join(ctx, authority.MembershipRequest{Group: read(t, s, g), Actor: m, Owner: n1, Node: node("n1")})
		if err != nil || !res.Written {
			t.Fatalf("join %s: %v %+v", m, err, res)
		}
		names = append(names, m.String())
	}
	members := func() []authority.Snapshot {
		var out []authority.Snapshot
		for _, m := range names {
			o, _ := keyspace.ParseObject(m)
			out = append(out, read(t, s, o))
		}
		return out
	}
	intent := func(id string) authority.WriteResult {
		w, err := s.Intend(ctx, authority.IntentRequest{Seen: read(t, s, g), Members: members(), Source: n1, LeaseID: lease1,
			Intent: authority.Intent{RelocationID: id, Target: n2, TargetNode: node("n2")}})
		if err != nil || !w.Written || len(w.Members) != 3 {
			t.Fatalf("intent: %v %+v", err, w)
		}
		for _, m := range w.Members {
			if m.Record.State != authority.StateRelocating || m.Record.Intent.RelocationID != id {
				t.Fatalf("member after intent: %+v", m.Record)
			}
		}
		return w
	}

	// Intent, then preserve: every record active again, same generations.
	w := intent("rel-1")
	var ms []authority.Snapshot
	for _, m := range names {
		ms = append(ms, w.Members[m])
	}
	p, err := s.Preserve(ctx, authority.PreserveRequest{Seen: w.Snapshot, Members: ms, Source: n1, RelocationID: "rel-1"})
	if err != nil || !p.Written {
		t.Fatalf("preserve: %v %+v", err, p)
	}
	// A commit of what the source saw at its intent now fails: the preserve
	// bumped every store version.
	parts := []authority.Participant{{Expected: w.Snapshot}}
	for _, m := range ms {
		parts = append(parts, authority.Participant{Expected: m})
	}
	cr, err := s.Commit(ctx, authority.CommitRequest{RelocationID: "rel-1", Participants: parts, Target: n2, TargetNode: node("n2")})
	if err != nil || cr.Committed {
		t.Fatalf("commit after preserve: %v %+v", err, cr)
	}
	for _, m := range members() {
		if m.Record.Owner != n1 || m.Record.State != authority.StateActive {
			t.Fatalf("after preserve: %+v", m.Record)
		}
	}

	// Intent, then commit: every record on n2, generation +1.
	w = intent("rel-2")
	parts = []authority.Participant{{Expected: w.Snapshot}}
	for _, m := range names {
		parts = append(parts, authority.Participant{Expected: w.Members[m]})
	}
	cr, err = s.Commit(ctx, authority.CommitRequest{RelocationID: "rel-2", Participants: parts, Target: n2, TargetNode: node("n2")})
	if err != nil || !cr.Committed || len(cr.Records) != 4 {
		t.Fatalf("commit: %v %+v", err, cr)
	}
	consistent(t, s, g, names...)
	for _, m := range members() {
		if m.Record.Owner != n2 || m.Record.AuthorityGeneration != 2 || m.Record.LastRelocation != "rel-2" {
			t.Fatalf("after commit: %+v", m.Record)
		}
	}
}

// The limit is the one etcd enforces. The largest transaction over a whole
// group is its recovery (participants + 3 compares, with the recovery
// controller's guard): a group of MaxGroupMembers members is recovered, one
// member more and etcd refuses the transaction (too many operations);
// CheckGroup refuses it up front.
func TestGroupLimitMatchesEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 250 records")
	}
	c, s := setup(t)
	ctx := context.Background()
	n1, lease1 := owner(t, c, "n1", 30)
	n2, _ := owner(t, c, "n2", 30)
	lim := authority.DefaultLimits()
	maxMembers := lim.MaxGroupMembers()
	if maxMembers != 124 {
		t.Fatalf("MaxGroupMembers with etcd's defaults: %d, want 124", maxMembers)
	}
	if err := lim.CheckGroup(keys, "group/x", maxMembers, nil); err != nil {
		t.Fatalf("a group at the limit refused: %v", err)
	}
	err := lim.CheckGroup(keys, "group/x", maxMembers+1, nil)
	var tl *authority.GroupTooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, authority.ErrGroupTooLarge) || tl.Max != maxMembers {
		t.Fatalf("over the limit: %v", err)
	}
	t.Logf("refusal: %v", err)

	// Two groups on n1, written past the check (Limits raised): one at the
	// limit, one over it.
	raised := authority.Limits{MaxTxnOps: 1000}
	build := func(g keyspace.Object, n int) []string {
		activate(t, s, g, n1)
		var names []string
		for i := range n {
			m := keyspace.Actor("counter", fmt.Sprintf("%s-%03d", g.ID, i))
			res, err := s.Join(ctx, authority.MembershipRequest{Group: read(t, s, g), Actor: m, Owner: n1, Node: node("n1"), Limits: raised})
			if err != nil || !res.Written {
				t.Fatalf("join %s: %v", m, err)
			}
			names = append(names, m.String())
		}
		return names
	}
	atLimit, over := keyspace.Group("at"), keyspace.Group("over")
	atNames := build(atLimit, maxMembers)
	overNames := build(over, maxMembers+1)

	// The relocation's transactions of the group at the limit fit.
	var members []authority.Snapshot
	for _, m := range atNames {
		o, _ := keyspace.ParseObject(m)
		members = append(members, read(t, s, o))
	}
	w, err := s.Intend(ctx, authority.IntentRequest{Seen: read(t, s, atLimit), Members: members, Source: n1, LeaseID: lease1,
		Intent: authority.Intent{RelocationID: "at", Target: n2}})
	if err != nil || !w.Written {
		t.Fatalf("intent of %d members: %v %+v", maxMembers, err, w.Written)
	}
	members = members[:0]
	for _, m := range atNames {
		members = append(members, w.Members[m])
	}
	p, err := s.Preserve(ctx, authority.PreserveRequest{Seen: w.Snapshot, Members: members, Source: n1, RelocationID: "at"})
	if err != nil || !p.Written {
		t.Fatalf("preserve of %d members: %v", maxMembers, err)
	}

	// n1 dies; its groups are recovered on n2, each whole, with the guard.
	if _, err := c.Revoke(ctx, lease1); err != nil {
		t.Fatal(err)
	}
	gk, err := c.Put(ctx, "/guard", "x")
	if err != nil {
		t.Fatal(err)
	}
	guard := &authority.Guard{Key: "/guard", CreateRevision: gk.Header.Revision}
	recoverOne := func(name string) (authority.WriteResult, error) {
		o, _ := keyspace.ParseObject(name)
		return s.Recover(ctx, authority.RecoverRequest{Seen: read(t, s, o), NewOwner: n2, Node: node("n2"), Guard: guard})
	}
	// etcd refuses the transaction (too many operations); the read-back
	// then shows nothing written.
	if w, err := recoverOne(overNames[0]); err != nil || w.Written || !w.Resolved {
		t.Fatalf("a group of %d members: recovered %v (resolved by a read-back after an etcd error: %v), %v; etcd should refuse it", maxMembers+1, w.Written, w.Resolved, err)
	}
	if r := read(t, s, over); r.Record.Owner != n1 {
		t.Fatalf("the group over the limit moved: %+v", r.Record)
	}
	w, err = recoverOne(atNames[7])
	if err != nil || !w.Written || w.Snapshot.Record.ObjectGeneration != 2 || w.Snapshot.Record.Owner != n2 {
		t.Fatalf("recover at the limit: %v %+v", err, w)
	}
	consistent(t, s, atLimit, atNames...)
	if r := read(t, s, atLimit); r.Record.Owner != n2 || r.Record.ObjectGeneration != 2 {
		t.Fatalf("group after the recovery: %+v", r.Record)
	}

	// The request size bound, with a small --max-request-bytes.
	small := authority.Limits{MaxTxnOps: 128, MaxRequestBytes: 64 << 10}
	var recs []authority.Snapshot
	for _, m := range atNames {
		o, _ := keyspace.ParseObject(m)
		recs = append(recs, read(t, s, o))
	}
	if err := small.CheckGroup(keys, "group/at", maxMembers, recs); !errors.Is(err, authority.ErrGroupTooLarge) {
		t.Fatalf("request bytes: %v", err)
	}
}

// Actor Join: the commit moves the actor to the group's owner and writes
// both sides of the membership in the same transaction.
func TestActorJoinCommit(t *testing.T) {
	c, s := setup(t)
	ctx := context.Background()
	n1, lease1 := owner(t, c, "n1", 30)
	n2, _ := owner(t, c, "n2", 30)
	g := keyspace.Group("g")
	gs := activate(t, s, g, n2)
	a := keyspace.Actor("counter", "a")
	as := activate(t, s, a, n1)
	w, err := s.Intend(ctx, authority.IntentRequest{Seen: as, Source: n1, LeaseID: lease1, Intent: authority.Intent{RelocationID: "join-1", Target: n2}})
	if err != nil || !w.Written {
		t.Fatal(err, w)
	}
	req := authority.CommitRequest{RelocationID: "join-1", Participants: []authority.Participant{{Expected: w.Snapshot}},
		Target: n2, TargetNode: node("n2"), Join: &authority.JoinCommit{Group: gs}}

	// A join into a group owned by another node than the target is refused.
	bad := req
	bad.Target = n1
	if _, err := s.Commit(ctx, bad); !errors.Is(err, authority.ErrNotGroupOwner) {
		t.Fatalf("join commit to a non-owner: %v", err)
	}
	cr, err := s.Commit(ctx, req)
	if err != nil || !cr.Committed || cr.Records[g.String()].Record.Members[0] != a.String() {
		t.Fatalf("join commit: %v %+v", err, cr)
	}
	consistent(t, s, g, a.String())
	if r := read(t, s, a); r.Record.Owner != n2 || r.Record.AuthorityGeneration != 2 {
		t.Fatalf("actor after join: %+v", r.Record)
	}
	// The read-back recognises the join commit.
	rc, err := s.ResolveCommit(ctx, req)
	if err != nil || !rc.Committed {
		t.Fatalf("resolve: %v %+v", err, rc)
	}
}
