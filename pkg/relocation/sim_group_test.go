package relocation

import (
	"fmt"
	"slices"
	"strings"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
)

// The fake store's group side (sim_test.go): a group relocation moves the
// group record (the primary, rec) and its members, each transaction over all
// of them; an Actor Join's commit also writes the joined group's record.

var simGroup = keyspace.Group("g1")

func simMember(i int) keyspace.Object { return keyspace.Actor("counter", fmt.Sprintf("m%d", i)) }

// setupGroups makes the store hold a group of cfg.Members members owned by
// source (rec becomes the group), or, for cfg.Join, a group owned by target
// that the actor joins; it returns the join group's name.
func (f *fakeStore) setupGroups(cfg simConfig, source, target record.OwnerRef) string {
	switch {
	case cfg.Members > 0:
		rev := f.bump()
		var names []string
		for i := range cfg.Members {
			m := simMember(i)
			names = append(names, m.String())
			f.members = append(f.members, record.Snapshot{Object: m, StoreVersion: rev, Revision: rev, Record: record.Record{
				Kind: m.Kind, Type: m.Type, ObjectGeneration: 1, AuthorityGeneration: 1, Owner: source, Node: simNode(source.ID),
				State: record.StateActive, Group: simGroup.String(),
			}})
		}
		f.rec = record.Snapshot{Object: simGroup, StoreVersion: rev, Revision: rev, Record: record.Record{
			Kind: keyspace.KindGroup, ObjectGeneration: 1, AuthorityGeneration: 1, Owner: source, Node: simNode(source.ID),
			State: record.StateActive, Members: names,
		}}
	case cfg.Join:
		rev := f.bump()
		f.joined = &record.Snapshot{Object: simGroup, StoreVersion: rev, Revision: rev, Record: record.Record{
			Kind: keyspace.KindGroup, ObjectGeneration: 1, AuthorityGeneration: 1, Owner: target, Node: simNode(target.ID),
			State: record.StateActive,
		}}
		return simGroup.String()
	}
	return ""
}

// objects are every record the store holds, by name.
func (f *fakeStore) objects() map[string]record.Snapshot {
	out := map[string]record.Snapshot{f.rec.Object.String(): f.rec}
	for _, m := range f.members {
		out[m.Object.String()] = m
	}
	if f.joined != nil {
		out[f.joined.Object.String()] = *f.joined
	}
	return out
}

// writeAll: If ModRevision(auth_i)=seen_i ∀i ∧ writer alive Then put plan(each).
func (f *fakeStore) writeAll(seen record.Snapshot, members []record.Snapshot, writer record.OwnerRef, plan func(record.Record) record.Record) WriteResult {
	ok := f.rec.StoreVersion == seen.StoreVersion && f.alive(writer) && len(members) == len(f.members)
	for i, m := range members {
		ok = ok && f.members[i].Object == m.Object && f.members[i].StoreVersion == m.StoreVersion
	}
	if ok {
		rev := f.bump()
		f.rec = record.Snapshot{Object: f.rec.Object, Record: plan(seen.Record), StoreVersion: rev, Revision: rev}
		for i, m := range members {
			f.members[i] = record.Snapshot{Object: m.Object, Record: plan(m.Record), StoreVersion: rev, Revision: rev}
		}
	}
	return WriteResult{Written: ok, Found: true, OwnerAlive: f.alive(writer), Snapshot: f.rec, Members: f.memberMap()}
}

func (f *fakeStore) memberMap() map[string]record.Snapshot {
	out := map[string]record.Snapshot{}
	for _, m := range f.members {
		out[m.Object.String()] = m
	}
	return out
}

// plannedJoin is the group record an Actor Join's commit writes.
func plannedJoin(g record.Snapshot, actor keyspace.Object, id string) record.Record {
	r := g.Record
	r.Members = append(slices.Clone(r.Members), actor.String())
	slices.Sort(r.Members)
	r.LastRelocation = id
	return r
}

// commitAll is the commit over every participant (and the join group).
func (f *fakeStore) commitAll(a Commit, target record.OwnerRef) CommitResult {
	cur := f.objects()
	ok := f.alive(target) && len(a.Participants) == 1+len(f.members)
	for _, p := range a.Participants {
		c, found := cur[p.Object.String()]
		ok = ok && found && sameBytes(c.Record, p.Record)
	}
	if a.Join != nil {
		ok = ok && f.joined != nil && f.joined.Record.Owner == target && f.joined.StoreVersion == a.Join.StoreVersion
	}
	if !ok {
		return CommitResult{Records: cur}
	}
	rev := f.bump()
	for _, p := range a.Participants {
		rec := planned(p, target, a.RelocationID)
		if a.Join != nil {
			rec.Group = a.Join.Object.String()
		}
		sn := record.Snapshot{Object: p.Object, Record: rec, StoreVersion: rev, Revision: rev}
		if p.Object == f.rec.Object {
			f.rec = sn
			continue
		}
		for i := range f.members {
			if f.members[i].Object == p.Object {
				f.members[i] = sn
			}
		}
	}
	if a.Join != nil {
		f.joined = &record.Snapshot{Object: f.joined.Object, Record: plannedJoin(*f.joined, a.Participants[0].Object, a.RelocationID.String()), StoreVersion: rev, Revision: rev}
	}
	t := target
	f.commitTo = &t
	return CommitResult{Committed: true, Records: f.objects()}
}

// resolveAll: committed iff every participant holds exactly its planned bytes.
func (f *fakeStore) resolveAll(a ResolveCommit, target record.OwnerRef) CommitResult {
	cur := f.objects()
	res := CommitResult{Records: cur}
	for _, p := range a.Participants {
		want := planned(p, target, a.RelocationID)
		if a.Join != nil {
			want.Group = a.Join.Object.String()
		}
		c := cur[p.Object.String()]
		if c.StoreVersion <= p.StoreVersion || string(c.Record.Encode()) != string(want.Encode()) {
			return res
		}
	}
	res.Committed = true
	return res
}

func (f *fakeStore) describeGroup(b *strings.Builder) {
	for _, m := range f.members {
		r := m.Record
		fmt.Fprintf(b, " | %s=%s %d/%d %s", m.Object.ID, r.Owner, r.ObjectGeneration, r.AuthorityGeneration, r.State)
	}
	if g := f.joined; g != nil {
		fmt.Fprintf(b, " | %s=%s members=%v", g.Object, g.Record.Owner, g.Record.Members)
		if f.rec.Record.Group != "" {
			fmt.Fprintf(b, " %s.group=%s", f.rec.Object.ID, f.rec.Record.Group)
		}
	}
}

// checkGroups asserts at every step what groups promise (docs/design.md §6):
// every member has its group's owner (never split between owners), and a
// membership is written on both sides or on neither.
func (s *sim) checkGroups() {
	st := s.store
	for _, m := range st.members {
		if m.Record.Owner != st.rec.Record.Owner {
			s.violate("group split: %s owned by %s, its group by %s", m.Object, m.Record.Owner, st.rec.Record.Owner)
		}
	}
	if g := st.joined; g != nil {
		listed := slices.Contains(g.Record.Members, st.rec.Object.String())
		named := st.rec.Record.Group == g.Object.String()
		if listed != named {
			s.violate("membership written on one side only: listed=%v named=%v", listed, named)
		}
		if named && st.rec.Record.Owner != g.Record.Owner {
			s.violate("member %s owned by %s, its group by %s", st.rec.Object, st.rec.Record.Owner, g.Record.Owner)
		}
	}
}

// groupNote describes the group side of an action (empty for one object).
func groupNote(members int, join keyspace.Object) string {
	var b strings.Builder
	if members > 0 {
		fmt.Fprintf(&b, " members=%d", members)
	}
	if !join.IsZero() {
		fmt.Fprintf(&b, " join=%s", join)
	}
	return b.String()
}
