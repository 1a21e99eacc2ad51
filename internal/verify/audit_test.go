package verify

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
)

var akeys = keyspace.Default()

// replay is a synthetic etcd history: owner keys and authority records.
type replay struct {
	r   *Replayer
	rev int64
}

func newReplay() *replay { return &replay{r: NewReplayer(akeys)} }

func (p *replay) owner(id string) record.OwnerRef {
	p.rev++
	p.r.Apply(AuditEvent{Revision: p.rev, Key: akeys.Owner(id), Value: []byte("{}"), CreateRevision: p.rev, ModRevision: p.rev})
	return record.OwnerRef{ID: id, Generation: p.rev}
}

func (p *replay) ownerGone(id string) {
	p.rev++
	p.r.Apply(AuditEvent{Revision: p.rev, Key: akeys.Owner(id), Delete: true, ModRevision: p.rev})
}

func (p *replay) put(obj string, rec record.Record) {
	p.rev++
	p.r.Apply(AuditEvent{Revision: p.rev, Key: akeys.Authority(keyspace.Actor("register", obj)), Value: rec.Encode(), ModRevision: p.rev})
}

func rec(owner record.OwnerRef, obj, aut int64) record.Record {
	return record.Record{Kind: "actor", Type: "register", ObjectGeneration: obj, AuthorityGeneration: aut, Owner: owner,
		Node: record.NodeRef{Address: "127.0.0.1:1"}, State: record.StateActive}
}

func relocating(r record.Record, id string, target record.OwnerRef) record.Record {
	r.State = record.StateRelocating
	r.Intent = &record.Intent{RelocationID: id, Target: target}
	return r
}

// The life of an object: activated on n1, moved to n2 (intent, commit),
// a relocation to n3 preserved, n2 dies, recovered on n3 with generation 2.
func goodLife(p *replay) (n1, n2, n3 record.OwnerRef) {
	n1, n2, n3 = p.owner("n1"), p.owner("n2"), p.owner("n3")
	r := rec(n1, 1, 1)
	p.put("x", r)
	p.put("x", relocating(r, "rel-1", n2))
	r = rec(n2, 1, 2)
	r.LastRelocation = "rel-1"
	p.put("x", r)
	p.put("x", relocating(r, "rel-2", n3))
	r.LastRelocation = "rel-2"
	p.put("x", r) // preserved
	p.ownerGone("n2")
	p.put("x", rec(n3, 2, 3)) // recovered
	return n1, n2, n3
}

func TestAuditCorrectLife(t *testing.T) {
	p := newReplay()
	goodLife(p)
	res := p.r.Result()
	if len(res.Violations) > 0 || res.TwoOwnerWindows != 0 {
		t.Fatalf("violations:\n%s", violations(res.Violations))
	}
	want := map[string]int{"activate": 1, "intent": 2, "commit": 1, "preserve": 1, "recover": 1}
	for k, n := range want {
		if res.Transitions[k] != n {
			t.Errorf("%s: %d, want %d (%v)", k, res.Transitions[k], n, res.Transitions)
		}
	}
	if c, ok := res.Commits["rel-1"]; !ok || c.Record.AuthorityGeneration != 2 {
		t.Errorf("commit of rel-1: %+v", c)
	}
	if len(res.Fences) != 3 {
		t.Errorf("fences %v", res.Fences)
	}
}

func TestAuditGenerationDecreases(t *testing.T) {
	p := newReplay()
	_, n2, _ := goodLife(p)
	_ = n2
	n1 := p.owner("n1b")
	p.put("x", rec(n1, 1, 4)) // object generation 2 → 1
	wantViolation(t, p.r.Result().Violations, "generation-decreased")

	p = newReplay()
	o := p.owner("n1")
	p.put("y", rec(o, 1, 3))
	p.put("y", rec(o, 1, 2)) // authority generation 3 → 2
	wantViolation(t, p.r.Result().Violations, "generation-decreased")
}

func TestAuditBadCommits(t *testing.T) {
	// A commit from a record with no intent.
	p := newReplay()
	n1, n2 := p.owner("n1"), p.owner("n2")
	p.put("x", rec(n1, 1, 1))
	p.put("x", rec(n2, 1, 2))
	wantViolation(t, p.r.Result().Violations, "commit")

	// A commit to a dead owner.
	p = newReplay()
	n1, n2 = p.owner("n1"), p.owner("n2")
	r := rec(n1, 1, 1)
	p.put("x", r)
	p.put("x", relocating(r, "rel-1", n2))
	p.ownerGone("n2")
	r = rec(n2, 1, 2)
	r.LastRelocation = "rel-1"
	p.put("x", r)
	wantViolation(t, p.r.Result().Violations, "dead-owner")

	// A jump of the authority generation.
	p = newReplay()
	n1 = p.owner("n1")
	p.put("x", rec(n1, 1, 1))
	p.put("x", rec(n1, 1, 3))
	wantViolation(t, p.r.Result().Violations, "generation-jump")
}

// Two owners: a recovery while the old owner is alive, an owner change
// without a new generation, one fence given to two owners.
func TestAuditTwoOwners(t *testing.T) {
	p := newReplay()
	n1, n2 := p.owner("n1"), p.owner("n2")
	p.put("x", rec(n1, 1, 1))
	p.put("x", rec(n2, 2, 2))
	res := p.r.Result()
	wantViolation(t, res.Violations, "two-owners")
	if res.TwoOwnerWindows != 1 {
		t.Fatalf("two-owner windows %d", res.TwoOwnerWindows)
	}

	p = newReplay()
	n1, n2 = p.owner("n1"), p.owner("n2")
	p.put("x", rec(n1, 1, 1))
	p.put("x", rec(n2, 1, 1))
	if res := p.r.Result(); res.TwoOwnerWindows == 0 {
		t.Fatalf("owner changed under one fence:\n%s", violations(res.Violations))
	}
}

// TestAuditRecordDeleted: an active actor's record may be deleted, and the
// name's next record must start at a larger object generation; a record
// deleted in a relocation, or a member's, is a violation.
func TestAuditRecordDeleted(t *testing.T) {
	del := func(p *replay, obj string) {
		p.rev++
		p.r.Apply(AuditEvent{Revision: p.rev, Key: akeys.Authority(keyspace.Actor("register", obj)), Delete: true})
	}
	p := newReplay()
	n1, n2 := p.owner("n1"), p.owner("n2")
	p.put("x", rec(n1, 1, 1))
	del(p, "x")
	p.put("x", rec(n1, 2, 1))
	if res := p.r.Result(); len(res.Violations) != 0 || res.Transitions["delete"] != 1 {
		t.Fatalf("a valid delete: %s %v", violations(res.Violations), res.Transitions)
	}
	p.rev++
	del(p, "x")
	p.put("x", rec(n1, 2, 1)) // the deleted generation again
	wantViolation(t, p.r.Result().Violations, "generation-decreased")

	p = newReplay()
	n1, n2 = p.owner("n1"), p.owner("n2")
	p.put("y", rec(n1, 1, 1))
	p.put("y", relocating(rec(n1, 1, 1), "r1", n2))
	del(p, "y")
	wantViolation(t, p.r.Result().Violations, "record-deleted")
	p = newReplay()
	n1 = p.owner("n1")
	m := rec(n1, 1, 1)
	m.Group = "group/g"
	p.put("z", m)
	del(p, "z")
	wantViolation(t, p.r.Result().Violations, "record-deleted")
}

// The watch audit against a real etcd: it follows the writes, catches up
// when stopped, and agrees with a range read.
func TestAuditWatch(t *testing.T) {
	srv := etcdtest.Single(t)
	c := etcdtest.Client(t, srv.Endpoint())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	ownerResp, err := c.Put(ctx, akeys.Owner("n1"), "{}", clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	n1 := record.OwnerRef{ID: "n1", Generation: ownerResp.Header.Revision}
	a, err := StartAudit(ctx, c, akeys, 0)
	if err != nil {
		t.Fatal(err)
	}
	key := akeys.Authority(keyspace.Actor("register", "x"))
	r := rec(n1, 1, 1)
	if _, err := c.Put(ctx, key, string(r.Encode())); err != nil {
		t.Fatal(err)
	}
	r.AuthorityGeneration = 3 // a jump
	if _, err := c.Put(ctx, key, string(r.Encode())); err != nil {
		t.Fatal(err)
	}
	res := a.Stop(ctx)
	if !res.Complete() || res.Events != 2 || res.Transitions["activate"] != 1 {
		t.Fatalf("audit: %+v", res)
	}
	wantViolation(t, res.Violations, "generation-jump")
	for _, v := range res.Violations {
		if v.Check == "watch-vs-range" {
			t.Errorf("%s", v)
		}
	}
}

func TestExecLogs(t *testing.T) {
	p := newReplay()
	goodLife(p)
	audit := p.r.Result()
	n1 := audit.Fences[FenceKey{Object: "actor/register/x", ObjectGeneration: 1, AuthorityGeneration: 1}].Owner.String()
	n2 := audit.Fences[FenceKey{Object: "actor/register/x", ObjectGeneration: 1, AuthorityGeneration: 2}].Owner.String()
	good := map[string][]ExecEntry{
		n1: {{Object: "actor/register/x", ObjectGeneration: 1, AuthorityGeneration: 1, OperationIDs: []string{"a", "b"}}},
		n2: {{Object: "actor/register/x", ObjectGeneration: 1, AuthorityGeneration: 2, OperationIDs: []string{"c"}}},
	}
	if c := CheckExecLogs(good, audit); len(c.Violations) > 0 {
		t.Fatalf("violations:\n%s", violations(c.Violations))
	}
	// n2 also executed under n1's fence, and executed "a" again.
	bad := map[string][]ExecEntry{
		n1: good[n1],
		n2: append([]ExecEntry{{Object: "actor/register/x", ObjectGeneration: 1, AuthorityGeneration: 1, OperationIDs: []string{"a"}}}, good[n2]...),
	}
	c := CheckExecLogs(bad, audit)
	wantViolation(t, c.Violations, "two-owners")
	wantViolation(t, c.Violations, "executed-twice")
	if c.TwoOwnerWindows != 1 || c.DoubleExecutions != 1 {
		t.Fatalf("%+v", c)
	}
}
