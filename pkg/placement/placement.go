// Package placement owns where objects may and should go. Eligible is the
// one rule for every move and placement (a relocation's target, a drain's,
// a rebalance's, an Actor Join's, a new object's, a recovered orphan's).
// Choose is the owner of a new or orphaned object: the rule a meshnode uses
// when it routes a call for an object without a live owner, and locationd's
// recovery controller uses when it re-activates an orphan, so both put an
// object on the same node.
//
// It is pure: candidates and their loads are inputs; no etcd, clock or
// randomness. The same inputs give the same answer.
//
// The choice: among the eligible candidates, the two ranked highest by a
// hash of (object, owner id)
// (rendezvous hashing) are compared, and the one with fewer objects per unit
// of weight wins; a tie goes to the higher-ranked one. Two choices spread
// objects without herding every new object onto the node whose count lags.
package placement

import (
	"fmt"
	"hash/fnv"
)

// Candidate is one live owner as placement sees it.
type Candidate struct {
	// ID is the owner id.
	ID string
	// Serving is false for a joining or draining owner: nothing is placed on it.
	Serving bool
	// Weight is the owner's placement weight; 0 makes a pure gateway.
	Weight int
	// Types the owner hosts; empty means every type.
	Types []string
	// Version is the application version the owner runs.
	Version string
	// Full: the owner is at its memory limits (meshnode --max-objects,
	// --memory-limit): it takes no new object.
	Full bool
}

// Need is what an object asks of the owner that receives it.
type Need struct {
	// Types the owner must host, every one (an actor's; a group's members').
	Types []string
	// Version, when set, is the application version the owner must run:
	// an object that carries state from one (a relocation) moves only to
	// the same version. A new or orphaned object sets none.
	Version string
	// From, when set, is the owner id the object moves away from: never
	// its own target.
	From string
}

// HostsType reports whether an owner advertising types hosts type t (an
// empty list hosts every type).
func HostsType(types []string, t string) bool {
	if len(types) == 0 {
		return true
	}
	for _, x := range types {
		if x == t {
			return true
		}
	}
	return false
}

// Eligible is the one rule for where an object may go (a placement, a
// recovery, a relocation's target, a drain's, a rebalance's, an Actor
// Join's): c is serving with weight > 0, hosts every type of need, runs
// its version if it names one, and is not the owner it comes from.
func Eligible(c Candidate, need Need) bool { return Ineligible(c, need) == "" }

// Ineligible says why c may not receive an object with need ("" when it
// may): the first rule of Eligible it breaks.
func Ineligible(c Candidate, need Need) string {
	switch {
	case need.From != "" && c.ID == need.From:
		return c.ID + " is the owner it comes from"
	case !c.Serving:
		return c.ID + " is not serving"
	case c.Weight <= 0:
		return c.ID + " has weight 0 (a gateway)"
	case c.Full:
		return c.ID + " is at its memory limits (--max-objects, --memory-limit)"
	case need.Version != "" && c.Version != need.Version:
		return fmt.Sprintf("%s runs application version %q, not %q", c.ID, c.Version, need.Version)
	}
	for _, t := range need.Types {
		if !HostsType(c.Types, t) {
			return c.ID + " does not host type " + t
		}
	}
	return ""
}

// Rendezvous is the rank of owner for object: FNV-64a of object, a zero
// byte, and owner.
func Rendezvous(object, owner string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(object))
	h.Write([]byte{0})
	h.Write([]byte(owner))
	return h.Sum64()
}

// Choose returns the index in cands of the owner for object (see the package
// doc), or false when no candidate is eligible (need: Eligible). load is
// the number of objects an owner holds now; it is asked only for the two
// finalists. Among equal ranks, the earlier candidate wins: pass cands in a
// stable order (by owner id).
func Choose(object string, need Need, cands []Candidate, load func(c Candidate) int) (int, bool) {
	first, second := -1, -1
	var h1, h2 uint64
	found := 0
	for i, c := range cands {
		if !Eligible(c, need) {
			continue
		}
		h := Rendezvous(object, c.ID)
		switch {
		case found == 0 || h > h1:
			second, h2 = first, h1
			first, h1 = i, h
		case found == 1 || h > h2:
			second, h2 = i, h
		}
		found++
	}
	if found == 0 {
		return -1, false
	}
	if found == 1 {
		return first, true
	}
	l1 := float64(load(cands[first])) / float64(cands[first].Weight)
	l2 := float64(load(cands[second])) / float64(cands[second].Weight)
	if l2 < l1 {
		return second, true
	}
	return first, true
}
