package verify

import (
	"fmt"
	"slices"
	"sort"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
)

// The group check of the audit (docs/design.md §6): at every etcd revision, for
// every group whose records changed at that revision,
//
//   - every member it lists has a record that names the group, with the
//     group's owner (members are never split between owners);
//   - every actor that names the group is listed by it (a membership is
//     written on both sides at once, or on neither).
//
// Several keys change at one revision (a group's commit moves every
// member in one transaction), so a revision is checked once all its events
// are applied: when the next revision's first event arrives, and at the end.

// groupAudit is the Replayer's group state.
type groupAudit struct {
	rev     int64                      // the revision being applied
	touched map[string]bool            // groups whose records changed at rev
	claims  map[string]map[string]bool // group → actors whose record names it
}

func (g *groupAudit) claim(group, actor string, on bool) {
	if group == "" {
		return
	}
	if g.claims == nil {
		g.claims = map[string]map[string]bool{}
	}
	if on {
		if g.claims[group] == nil {
			g.claims[group] = map[string]bool{}
		}
		g.claims[group][actor] = true
	} else {
		delete(g.claims[group], actor)
	}
}

func (g *groupAudit) touch(group string) {
	if group == "" {
		return
	}
	if g.touched == nil {
		g.touched = map[string]bool{}
	}
	g.touched[group] = true
}

func isGroupName(name string) bool {
	o, err := keyspace.ParseObject(name)
	return err == nil && o.Kind == keyspace.KindGroup
}

// groupsLoaded indexes a record of the initial state.
func (r *Replayer) groupsLoaded(obj string, rec record.Record) {
	r.groups.claim(rec.Group, obj, true)
}

// groupsChanged notes a write of obj (next nil: deleted) at the current revision.
func (r *Replayer) groupsChanged(obj string, prev record.Record, next *record.Record) {
	g := &r.groups
	if isGroupName(obj) {
		g.touch(obj)
		return
	}
	g.claim(prev.Group, obj, false)
	g.touch(prev.Group)
	if next != nil {
		g.claim(next.Group, obj, true)
		g.touch(next.Group)
	}
}

// groupsAt is called before an event of revision rev is applied (0: at
// the end): if rev starts a new revision, the previous one is complete and
// its touched groups are checked.
func (r *Replayer) groupsAt(rev int64) {
	g := &r.groups
	if rev != 0 && rev == g.rev {
		return
	}
	at := g.rev
	g.rev = rev
	if len(g.touched) == 0 {
		return
	}
	names := make([]string, 0, len(g.touched))
	for n := range g.touched {
		names = append(names, n)
	}
	g.touched = nil
	sort.Strings(names)
	for _, name := range names {
		r.checkGroup(name, at)
	}
}

func (r *Replayer) checkGroup(name string, rev int64) {
	at := fmt.Sprintf("revision %d", rev)
	gr, ok := r.records[name]
	claims := r.groups.claims[name]
	split := false
	if !ok {
		for a := range claims {
			split = true
			r.violate("group-membership", a, fmt.Sprintf("%s: names %s, which has no record", at, name))
		}
	} else {
		for _, m := range gr.rec.Members {
			mr, ok := r.records[m]
			switch {
			case !ok:
				split = true
				r.violate("group-membership", name, fmt.Sprintf("%s: lists %s, which has no record", at, m))
			case mr.rec.Group != name:
				split = true
				r.violate("group-membership", name, fmt.Sprintf("%s: lists %s, whose record names group %q", at, m, mr.rec.Group))
			case mr.rec.Owner != gr.rec.Owner:
				split = true
				r.violate("group-split", name, fmt.Sprintf("%s: member %s is owned by %s, the group by %s", at, m, mr.rec.Owner, gr.rec.Owner))
			}
		}
		for a := range claims {
			if !slices.Contains(gr.rec.Members, a) {
				split = true
				r.violate("group-membership", name, fmt.Sprintf("%s: %s names the group, which does not list it", at, a))
			}
		}
	}
	if split {
		r.res.GroupSplits++
	}
}
