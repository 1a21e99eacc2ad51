package verify

import (
	"fmt"
	"sort"

	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// FenceCheck is the result of the checks on the fences replies carried,
// across every workload.
type FenceCheck struct {
	// StaleAccepted: replies accepted with a fence older than one another
	// reply had already shown for the object before the call (a superseded
	// owner answered after the new one).
	StaleAccepted int `json:"staleAccepted"`
	// Undeclared: object generations superseded without any StateLost reply.
	Undeclared int `json:"undeclared"`
	// NotGranted: replies under a fence the audit never saw in etcd.
	NotGranted int `json:"notGranted"`
	// TwoOwners: replies under a fence etcd granted to another owner.
	TwoOwners  int         `json:"twoOwners"`
	Violations []Violation `json:"violations,omitempty"`
}

func (c *FenceCheck) violate(check, object, detail string, ops ...Op) {
	c.Violations = append(c.Violations, Violation{Check: check, Object: object, Detail: detail, Ops: ops})
}

// CheckFences checks, per object, that no reply carried a fence older than
// the newest fence shown before it was called: by a reply that returned, or
// by a relocation whose commit the audit saw and whose request returned
// (a relocation is an operation too); and that every object generation of a
// memory object that was superseded was declared lost by a StateLost reply
// carrying a larger generation (a durable object keeps its state across a
// recovery: durableObject). With an audit it also checks every reply's fence against the
// owners etcd granted.
func CheckFences(h *History, audit *AuditResult) FenceCheck {
	var c FenceCheck
	ops := h.Ops()
	losses := DeclaredLosses(ops)
	relocs := committedRelocations(h, audit)
	for obj, oops := range byObject(ops) {
		var fenced []Op
		for _, o := range oops {
			if o.Fence.Known() && o.Outcome != Unknown {
				fenced = append(fenced, o)
			}
		}
		// Real-time order: ops by return, swept while visiting by call.
		byRet := append([]Op(nil), fenced...)
		for _, r := range relocs[obj] {
			if r.ret != Infinity {
				byRet = append(byRet, Op{ID: -1, Object: obj, Kind: "relocation", Call: r.call, Return: r.ret, End: r.ret, Outcome: OK,
					Fence: Fence{Owner: r.owner.ID, OwnerGeneration: r.owner.Generation, ObjectGeneration: r.obj, AuthorityGeneration: r.gen}})
			}
		}
		sort.Slice(byRet, func(i, j int) bool { return byRet[i].Return < byRet[j].Return })
		var newest Op
		k := 0
		for _, o := range fenced { // in call order
			for k < len(byRet) && byRet[k].Return < o.Call {
				if !newest.Fence.Known() || byRet[k].Fence.Newer(newest.Fence) {
					newest = byRet[k]
				}
				k++
			}
			if newest.Fence.Known() && newest.Fence.Newer(o.Fence) {
				c.StaleAccepted++
				if c.StaleAccepted <= 20 {
					c.violate("stale-reply", obj, fmt.Sprintf("reply under %v accepted after a reply under %v had returned", o.Fence, newest.Fence), newest, o)
				}
			}
		}
		// Every superseded generation was declared lost.
		gens := map[int64]Op{}
		var maxGen int64
		for _, o := range fenced {
			g := o.Fence.ObjectGeneration
			if _, ok := gens[g]; !ok {
				gens[g] = o
			}
			maxGen = max(maxGen, g)
		}
		for g, first := range gens {
			if g == maxGen || durableObject(obj) {
				continue // a durable object's state outlives its generation: nothing to declare
			}
			declared := false
			for _, l := range losses[obj] {
				declared = declared || l.Generation > g
			}
			if !declared {
				c.Undeclared++
				c.violate("undeclared-loss", obj, fmt.Sprintf("object generation %d was superseded (up to %d) and no reply said StateLost", g, maxGen), first)
			}
		}
		if audit == nil {
			continue
		}
		reported := map[FenceKey]bool{}
		for _, o := range fenced {
			key := FenceKey{Object: obj, ObjectGeneration: o.Fence.ObjectGeneration, AuthorityGeneration: o.Fence.AuthorityGeneration}
			g, ok := audit.Fences[key]
			switch {
			case !ok:
				if !audit.Complete() || reported[key] {
					continue
				}
				reported[key] = true
				c.NotGranted++
				c.violate("fence-not-granted", obj, fmt.Sprintf("reply under %v: etcd never held that record", o.Fence), o)
			case g.Owner.ID != o.Fence.Owner || g.Owner.Generation != o.Fence.OwnerGeneration:
				if reported[key] {
					continue
				}
				reported[key] = true
				c.TwoOwners++
				c.violate("two-owners", obj, fmt.Sprintf("reply served by %s under o%d/a%d, which etcd granted to %s (revision %d)",
					o.Fence.OwnerPair(), key.ObjectGeneration, key.AuthorityGeneration, g.Owner, g.Revision), o)
			}
		}
	}
	return c
}

// RelocationCheck compares the relocator's outcomes with etcd's commits.
type RelocationCheck struct {
	Attempted int            `json:"attempted"`
	Results   map[string]int `json:"results"`
	// Commits seen in the audit for the relocator's relocations.
	Committed int `json:"committed"`
	// Samples of the messages per result (a few each).
	Samples    map[string][]string `json:"samples,omitempty"`
	Violations []Violation         `json:"violations,omitempty"`
}

// CheckRelocations counts the relocator's results and checks each ended
// relocation against the audit: completed ⇔ a commit of that relocation id
// is in etcd's history; aborted ⇒ none is. With mustEnd, a request never
// answered (result "unknown": the relocator's timeout, longer than the
// relocation's own deadline, passed) is a violation too: every relocation
// ends within its deadline (docs/design.md §9.4).
func CheckRelocations(rs []Relocation, audit *AuditResult, mustEnd bool) RelocationCheck {
	c := RelocationCheck{Results: map[string]int{}, Samples: map[string][]string{}}
	for _, r := range rs {
		c.Attempted++
		c.Results[r.Result]++
		if r.Err != "" && len(c.Samples[r.Result]) < 3 {
			c.Samples[r.Result] = append(c.Samples[r.Result], fmt.Sprintf("%s (%s, target %q): %s", r.Object, r.Mode, r.Target, r.Err))
		}
		if mustEnd && r.Result == "unknown" {
			c.Violations = append(c.Violations, Violation{Check: "relocation-unended", Object: r.Object,
				Detail: fmt.Sprintf("relocation request (%s, target %q) called at %.3fs got no answer in %.1fs: %s",
					r.Mode, r.Target, float64(r.Call)/1e9, float64(r.Return-r.Call)/1e9, r.Err)})
		}
		if audit == nil || r.RelocationID == "" {
			continue
		}
		_, committed := audit.Commits[r.RelocationID]
		if committed {
			c.Committed++
		}
		switch {
		case r.Result == "completed" && !committed && audit.Complete():
			c.Violations = append(c.Violations, Violation{Check: "relocation-outcome", Object: r.Object,
				Detail: fmt.Sprintf("relocation %s (%s → %s) reported completed; etcd has no commit of it", r.RelocationID, r.Source, r.To)})
		case r.Result == "aborted" && committed:
			c.Violations = append(c.Violations, Violation{Check: "relocation-outcome", Object: r.Object,
				Detail: fmt.Sprintf("relocation %s (%s → %s) reported aborted; etcd committed it at revision %d", r.RelocationID, r.Source, r.To, audit.Commits[r.RelocationID].Revision)})
		}
	}
	return c
}

// durableObject reports whether obj is of a durable built-in type (dbank,
// dlist, …): its state survives a recovery, so a superseded object
// generation is no loss, and no StateLost is declared for it (a missing
// acknowledged write is then a silent loss in the workload's check).
func durableObject(obj string) bool {
	o, err := keyspace.ParseObject(obj)
	return err == nil && builtin.IsDurable(o.Type)
}
