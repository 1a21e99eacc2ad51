package verify

import (
	"testing"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
)

// putAt writes several records in one revision (one transaction).
func (p *replay) putAt(recs map[keyspace.Object]record.Record) {
	p.rev++
	for obj, rec := range recs {
		p.r.Apply(AuditEvent{Revision: p.rev, Key: akeys.Authority(obj), Value: rec.Encode(), ModRevision: p.rev})
	}
}

func groupRec(owner record.OwnerRef, aut int64, members ...string) record.Record {
	return record.Record{Kind: "group", ObjectGeneration: 1, AuthorityGeneration: aut, Owner: owner, Node: record.NodeRef{Address: "x:1"},
		State: record.StateActive, Members: members}
}

func memberRec(owner record.OwnerRef, aut int64, group string) record.Record {
	r := rec(owner, 1, aut)
	r.Group = group
	return r
}

func TestAuditGroups(t *testing.T) {
	g, m0, m1 := keyspace.Group("g"), keyspace.Actor("register", "m0"), keyspace.Actor("register", "m1")
	gn := g.String()
	good := func(p *replay) (record.OwnerRef, record.OwnerRef) {
		n1, n2 := p.owner("n1"), p.owner("n2")
		p.putAt(map[keyspace.Object]record.Record{g: groupRec(n1, 1)})
		// Joins: both records in one transaction.
		p.putAt(map[keyspace.Object]record.Record{g: groupRec(n1, 1, m0.String()), m0: memberRec(n1, 1, gn)})
		p.putAt(map[keyspace.Object]record.Record{g: groupRec(n1, 1, m0.String(), m1.String()), m1: memberRec(n1, 1, gn)})
		// The group moves: intent and commit over every participant.
		in := func(r record.Record) record.Record { return relocating(r, "rel-g", n2) }
		p.putAt(map[keyspace.Object]record.Record{g: in(groupRec(n1, 1, m0.String(), m1.String())), m0: in(memberRec(n1, 1, gn)), m1: in(memberRec(n1, 1, gn))})
		c := func(r record.Record) record.Record { r.LastRelocation = "rel-g"; return r }
		p.putAt(map[keyspace.Object]record.Record{g: c(groupRec(n2, 2, m0.String(), m1.String())), m0: c(memberRec(n2, 2, gn)), m1: c(memberRec(n2, 2, gn))})
		return n1, n2
	}
	p := newReplay()
	good(p)
	if res := p.r.Result(); len(res.Violations) > 0 || res.GroupSplits != 0 {
		t.Fatalf("a correct group life: %d splits\n%s", res.GroupSplits, violations(res.Violations))
	}

	// A member committed at another revision than its group: split.
	p = newReplay()
	n1, n2 := good(p)
	in := func(r record.Record) record.Record { return relocating(r, "rel-back", n1) }
	p.putAt(map[keyspace.Object]record.Record{g: in(groupRec(n2, 2, m0.String(), m1.String())), m0: in(memberRec(n2, 2, gn)), m1: in(memberRec(n2, 2, gn))})
	c := func(r record.Record) record.Record { r.LastRelocation = "rel-back"; return r }
	p.putAt(map[keyspace.Object]record.Record{g: c(groupRec(n1, 3, m0.String(), m1.String())), m0: c(memberRec(n1, 3, gn))})
	p.putAt(map[keyspace.Object]record.Record{m1: c(memberRec(n1, 3, gn))})
	res := p.r.Result()
	wantViolation(t, res.Violations, "group-split")
	if res.GroupSplits != 1 {
		t.Fatalf("splits %d, want 1 (one revision)", res.GroupSplits)
	}

	// A membership written on one side only.
	p = newReplay()
	n1 = p.owner("n1")
	p.putAt(map[keyspace.Object]record.Record{g: groupRec(n1, 1)})
	p.putAt(map[keyspace.Object]record.Record{m0: memberRec(n1, 1, gn)})
	wantViolation(t, p.r.Result().Violations, "group-membership")

	p = newReplay()
	n1 = p.owner("n1")
	p.putAt(map[keyspace.Object]record.Record{m0: rec(n1, 1, 1)})
	p.putAt(map[keyspace.Object]record.Record{g: groupRec(n1, 1, m0.String())})
	wantViolation(t, p.r.Result().Violations, "group-membership")
}
