package verify

import (
	"context"
	"errors"
	"fmt"
	"sort"
)

// Groups in a run (docs/design.md §6). A workload whose objects are put into
// groups (Counter.Groups, List.Groups) implements Grouped; Run asks the
// cluster, which must implement GroupMaker, to create those groups before
// the load starts, and the relocation storm then relocates the groups
// (every member moves with its group) instead of the members alone, which
// the nodes refuse. The audit checks at every revision that no member has
// another owner than its group (audit_groups.go).

// GroupMaker is a cluster that can create groups: MakeGroup creates group
// (group/<id>) on some node and makes members join it (actors that do not
// exist yet are created there as members). internal/chaos implements it
// through the nodes' AdminService.
type GroupMaker interface {
	MakeGroup(ctx context.Context, group string, members []string) error
}

// Grouped is a workload whose objects are put into groups at setup.
type Grouped interface {
	// GroupMembers maps each group's name to its members (a subset of
	// Objects()); empty: no groups.
	GroupMembers() map[string][]string
}

// ErrNoGroupMaker: a workload asks for groups and the cluster cannot make them.
var ErrNoGroupMaker = errors.New("verify: the workload puts its objects into groups but the cluster is not a GroupMaker")

// groupsOf returns the groups of the workloads that have some.
func groupsOf(ws []Workload) map[string][]string {
	out := map[string][]string{}
	for _, w := range ws {
		if g, ok := w.(Grouped); ok {
			for name, ms := range g.GroupMembers() {
				out[name] = ms
			}
		}
	}
	return out
}

// makeGroups creates the workloads' groups through the cluster.
func makeGroups(ctx context.Context, c Cluster, groups map[string][]string) error {
	if len(groups) == 0 {
		return nil
	}
	gm, ok := c.(GroupMaker)
	if !ok {
		return ErrNoGroupMaker
	}
	for name, ms := range groups {
		if err := gm.MakeGroup(ctx, name, ms); err != nil {
			return fmt.Errorf("verify: make %s with %d members: %w", name, len(ms), err)
		}
	}
	return nil
}

// splitGroups partitions objs into groups of about equal size: group i
// (named group/<prefix>g<i>) holds the objects k with k mod n = i. n ≤ 0:
// no groups.
func splitGroups(prefix string, objs []string, n int) map[string][]string {
	if n <= 0 || len(objs) == 0 {
		return nil
	}
	n = min(n, len(objs))
	out := make(map[string][]string, n)
	for k, o := range objs {
		name := fmt.Sprintf("group/%sg%d", prefix, k%n)
		out[name] = append(out[name], o)
	}
	return out
}

// GroupMembers implements Grouped: the counters split into Groups groups,
// group/<prefix>counter-g<i>.
func (w *Counter) GroupMembers() map[string][]string {
	return splitGroups(w.Prefix+"counter-", w.Objects(), w.Groups)
}

// GroupMembers implements Grouped: the lists (the first N objects; with
// Rotate, the objects that replace them later are in no group) split into
// Groups groups, group/<prefix><type>-g<i>.
func (w *List) GroupMembers() map[string][]string {
	return splitGroups(w.Prefix+w.typ()+"-", w.Objects(), w.Groups)
}

// stormObjects is what the relocation storm moves: the groups, and every
// object that is not a group's member.
func stormObjects(objs []string, groups map[string][]string) (singles, gs []string) {
	member := map[string]bool{}
	for g, ms := range groups {
		gs = append(gs, g)
		for _, m := range ms {
			member[m] = true
		}
	}
	for _, o := range objs {
		if !member[o] {
			singles = append(singles, o)
		}
	}
	return singles, gs
}

// stormGroups is the sorted names of groups.
func stormGroups(groups map[string][]string) []string {
	_, gs := stormObjects(nil, groups)
	sort.Strings(gs)
	return gs
}
