// Package statecheck audits durable objects' state stores from the nodes'
// execution logs (pkg/node/execlog Claim and Wrote lines): the claims and
// writes of each object, ordered by the state version each made or read,
// must follow the fencing rule of docs/design.md §5b —
//
//   - no write under a fence after a claim under a newer fence (a paused
//     owner's write that landed over its successor's: stale-write);
//   - no claim that loaded less than the last write before it (a new
//     owner that read, then let a write land, then raised the fence:
//     claim-missed-write).
//
// Versions are the store's own (an etcd ModRevision, a PostgreSQL row
// version): they only grow. A line lost with a killed node only hides
// events; it never makes a correct history look wrong.
package statecheck

import (
	"fmt"
	"sort"

	"github.com/meshloc/meshloc/pkg/node/execlog"
	"github.com/meshloc/meshloc/pkg/record"
)

// Result is what Check found.
type Result struct {
	Claims, Writes int
	Violations     []Violation
}

// Violation is one breach of the rule.
type Violation struct {
	Check  string // "stale-write" or "claim-missed-write"
	Object string
	Detail string
}

// event is one claim or write, with who made it.
type event struct {
	owner string
	fence record.Fence
	execlog.StateEvent
}

// Check audits every object's claims and writes in logs.
func Check(logs map[string][]execlog.Entry) Result {
	var r Result
	by := map[string][]event{}
	for owner, es := range logs {
		for _, e := range es {
			f := record.Fence{ObjectGeneration: e.ObjectGeneration, AuthorityGeneration: e.AuthorityGeneration}
			for _, s := range e.States {
				by[e.Object] = append(by[e.Object], event{owner: owner, fence: f, StateEvent: s})
				if s.Kind == "claim" {
					r.Claims++
				} else {
					r.Writes++
				}
			}
		}
	}
	objects := make([]string, 0, len(by))
	for o := range by {
		objects = append(objects, o)
	}
	sort.Strings(objects)
	for _, o := range objects {
		r.Violations = append(r.Violations, checkObject(o, by[o])...)
	}
	return r
}

// checkObject audits one object's events.
func checkObject(obj string, evs []event) []Violation {
	// By version; at one version (etcd: a claim that read a write) the
	// write first.
	sort.SliceStable(evs, func(i, j int) bool {
		if evs[i].Version != evs[j].Version {
			return evs[i].Version < evs[j].Version
		}
		return evs[i].Kind == "write" && evs[j].Kind == "claim"
	})
	var out []Violation
	var lastWrite, lastFresh *event
	for i := range evs {
		e := &evs[i]
		if e.Kind == "write" {
			lastWrite = e
			continue
		}
		if e.Fresh {
			lastFresh = e
			continue
		}
		if w := lastWrite; w != nil && (lastFresh == nil || w.Version > lastFresh.Version) &&
			w.fence.ObjectGeneration > e.Deleted && e.Seq < w.Seq {
			out = append(out, Violation{Check: "claim-missed-write", Object: obj, Detail: fmt.Sprintf(
				"%s claimed under o%d/a%d at version %d and loaded sequence %d, but %s had written sequence %d at version %d before it",
				e.owner, e.fence.ObjectGeneration, e.fence.AuthorityGeneration, e.Version, e.Seq, w.owner, w.Seq, w.Version)})
		}
		for j := i + 1; j < len(evs); j++ { // writes after this claim under an older fence
			w := &evs[j]
			if w.Kind == "write" && e.fence.Newer(w.fence) && w.fence.ObjectGeneration > e.Deleted && w.Version > e.Version {
				out = append(out, Violation{Check: "stale-write", Object: obj, Detail: fmt.Sprintf(
					"%s wrote sequence %d under o%d/a%d at version %d, after %s claimed under the newer o%d/a%d at version %d",
					w.owner, w.Seq, w.fence.ObjectGeneration, w.fence.AuthorityGeneration, w.Version, e.owner, e.fence.ObjectGeneration, e.fence.AuthorityGeneration, e.Version)})
			}
		}
	}
	return out
}
