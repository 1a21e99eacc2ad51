package placement

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// reference is the node's placement as it was written before it moved here
// (pkg/node route.go, place): the shared rule must choose the same.
func reference(object, typ string, cands []Candidate, load func(Candidate) int) (int, bool) {
	first, second := -1, -1
	var h1, h2 uint64
	found := 0
	for i, c := range cands {
		if !c.Serving || c.Weight <= 0 || !HostsType(c.Types, typ) {
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
	switch found {
	case 0:
		return -1, false
	case 1:
		return first, true
	}
	l1 := float64(load(cands[first])) / float64(cands[first].Weight)
	l2 := float64(load(cands[second])) / float64(cands[second].Weight)
	if l2 < l1 {
		return second, true
	}
	return first, true
}

func TestChooseMatchesTheNodesRule(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	types := []string{"counter", "bank"}
	for iter := range 2000 {
		var cands []Candidate
		loads := map[string]int{}
		for i := range r.IntN(6) {
			c := Candidate{ID: fmt.Sprintf("n%d", i), Serving: r.IntN(5) > 0, Weight: r.IntN(3)}
			if r.IntN(3) == 0 {
				c.Types = []string{types[r.IntN(2)]}
			}
			loads[c.ID] = r.IntN(10)
			cands = append(cands, c)
		}
		load := func(c Candidate) int { return loads[c.ID] }
		obj := fmt.Sprintf("actor/counter/o%d", iter)
		typ := types[r.IntN(2)]
		gi, gok := Choose(obj, Need{Types: []string{typ}}, cands, load)
		wi, wok := reference(obj, typ, cands, load)
		if gi != wi || gok != wok {
			t.Fatalf("iter %d: Choose %d %v, the node's rule %d %v (%+v)", iter, gi, gok, wi, wok, cands)
		}
		if gok && !Eligible(cands[gi], Need{Types: []string{typ}}) {
			t.Fatalf("iter %d: chose ineligible %+v", iter, cands[gi])
		}
	}
}

func TestEligible(t *testing.T) {
	for _, tc := range []struct {
		c     Candidate
		types []string
		want  bool
	}{
		{Candidate{ID: "a", Serving: true, Weight: 1}, []string{"counter"}, true},
		{Candidate{ID: "a", Serving: false, Weight: 1}, []string{"counter"}, false},
		{Candidate{ID: "a", Serving: true, Weight: 0}, []string{"counter"}, false},
		{Candidate{ID: "a", Serving: true, Weight: 1, Types: []string{"bank"}}, []string{"counter"}, false},
		{Candidate{ID: "a", Serving: true, Weight: 1, Types: []string{"bank", "counter"}}, []string{"counter", "bank"}, true},
		{Candidate{ID: "a", Serving: true, Weight: 1, Types: []string{"counter"}}, []string{"counter", "bank"}, false},
		{Candidate{ID: "a", Serving: true, Weight: 1}, nil, true},
	} {
		if got := Eligible(tc.c, Need{Types: tc.types}); got != tc.want {
			t.Errorf("Eligible(%+v, %v) = %v", tc.c, tc.types, got)
		}
	}
}

// The less loaded of the top two wins; with equal loads per weight, the
// higher-ranked one.
func TestChooseLoad(t *testing.T) {
	cands := []Candidate{{ID: "a", Serving: true, Weight: 1}, {ID: "b", Serving: true, Weight: 1}}
	obj := "actor/counter/x"
	top := 0
	if Rendezvous(obj, "b") > Rendezvous(obj, "a") {
		top = 1
	}
	if i, _ := Choose(obj, Need{Types: []string{"counter"}}, cands, func(Candidate) int { return 3 }); i != top {
		t.Fatalf("equal loads: %d, want the top-ranked %d", i, top)
	}
	if i, _ := Choose(obj, Need{Types: []string{"counter"}}, cands, func(c Candidate) int {
		if c.ID == cands[top].ID {
			return 5
		}
		return 1
	}); i != 1-top {
		t.Fatalf("the top-ranked is busier: %d, want %d", i, 1-top)
	}
}

// The rule's version and source clauses, and its reasons.
func TestIneligibleReasons(t *testing.T) {
	c := Candidate{ID: "a", Serving: true, Weight: 1, Version: "v2", Types: []string{"counter"}}
	for _, tc := range []struct {
		need Need
		want string
	}{
		{Need{Types: []string{"counter"}}, ""},
		{Need{Types: []string{"counter"}, Version: "v2"}, ""},
		{Need{Types: []string{"counter"}, Version: "v1"}, `a runs application version "v2", not "v1"`},
		{Need{Types: []string{"counter"}, From: "a"}, "a is the owner it comes from"},
		{Need{Types: []string{"bank"}}, "a does not host type bank"},
	} {
		if got := Ineligible(c, tc.need); got != tc.want {
			t.Errorf("Ineligible(%+v) = %q, want %q", tc.need, got, tc.want)
		}
	}
}
