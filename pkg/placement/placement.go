// Package placement chooses the owner of a new or orphaned object: the rule a
// meshnode uses when it routes a call for an object without a live owner, and
// locationd's recovery controller uses when it re-activates an orphan, so
// both put an object on the same node.
//
// It is pure: candidates and their loads are inputs; no etcd, clock or
// randomness. The same inputs give the same answer.
//
// The rule: among the eligible candidates (serving, weight > 0, hosting every
// required type), the two ranked highest by a hash of (object, owner id)
// (rendezvous hashing) are compared, and the one with fewer objects per unit
// of weight wins; a tie goes to the higher-ranked one. Two choices spread
// objects without herding every new object onto the node whose count lags.
package placement

import "hash/fnv"

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

// Eligible reports whether c may receive an object that needs every type of
// types: serving, weight > 0, and hosting each of them.
func Eligible(c Candidate, types []string) bool {
	if !c.Serving || c.Weight <= 0 {
		return false
	}
	for _, t := range types {
		if !HostsType(c.Types, t) {
			return false
		}
	}
	return true
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
// doc), or false when no candidate is eligible. types are the object types
// the owner must host (one for an actor; a group's member types). load is
// the number of objects an owner holds now; it is asked only for the two
// finalists. Among equal ranks, the earlier candidate wins: pass cands in a
// stable order (by owner id).
func Choose(object string, types []string, cands []Candidate, load func(c Candidate) int) (int, bool) {
	first, second := -1, -1
	var h1, h2 uint64
	found := 0
	for i, c := range cands {
		if !Eligible(c, types) {
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
