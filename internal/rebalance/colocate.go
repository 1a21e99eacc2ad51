package rebalance

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"slices"
	"strings"
)

// ReasonColocate: the move puts heavy edges of the object graph on one
// owner (Input.Colocate).
const ReasonColocate Reason = "colocate"

// Edge is one edge of the object graph: messages between two objects, as
// the nodes counted them (pkg/traffic). Direction does not matter: an
// edge costs the same whichever way its messages go.
type Edge struct {
	From, To string
	Weight   uint64
}

// Traffic is the object graph's traffic before and after a co-location
// plan: Cross is the weight of the edges whose objects are on different
// owners, Total the weight of every edge between two objects of the input.
type Traffic struct {
	Total       uint64
	CrossBefore uint64
	CrossAfter  uint64
	// Edges counted (between two objects of the input, not a self-loop).
	Edges int
}

// FractionBefore is the cross-node share of the traffic before the plan.
func (t Traffic) FractionBefore() float64 { return fraction(t.CrossBefore, t.Total) }

// FractionAfter is the cross-node share of the traffic after the plan.
func (t Traffic) FractionAfter() float64 { return fraction(t.CrossAfter, t.Total) }

func fraction(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// graph is the input's edges between units (a member's edges are its
// group's), undirected, with the weights summed.
type graph struct {
	adj   [][]arc // by unit index
	total uint64
	edges int
}

type arc struct {
	to int
	w  uint64
}

func (st *state) graph(edges []Edge) (*graph, error) {
	idx := make(map[string]int, len(st.units))
	for i, u := range st.units {
		idx[u.name] = i
	}
	// A member's messages are its group's: the group moves as one.
	for i, u := range st.units {
		for _, m := range st.members[u.name] {
			idx[m] = i
		}
	}
	type pair struct{ a, b int }
	sum := map[pair]uint64{}
	for _, e := range edges {
		if e.From == "" || e.To == "" {
			return nil, fmt.Errorf("%w: an edge without from or to", ErrInvalidInput)
		}
		a, okA := idx[e.From]
		b, okB := idx[e.To]
		if !okA || !okB || a == b || e.Weight == 0 {
			continue // an object that is not ours any more, or a self-loop
		}
		if a > b {
			a, b = b, a
		}
		w := sum[pair{a, b}]
		if w+e.Weight < w {
			return nil, fmt.Errorf("%w: edge weights overflow", ErrInvalidInput)
		}
		sum[pair{a, b}] = w + e.Weight
	}
	g := &graph{adj: make([][]arc, len(st.units)), edges: len(sum)}
	for p, w := range sum {
		g.adj[p.a] = append(g.adj[p.a], arc{p.b, w})
		g.adj[p.b] = append(g.adj[p.b], arc{p.a, w})
		if g.total+w < g.total {
			return nil, fmt.Errorf("%w: edge weights overflow", ErrInvalidInput)
		}
		g.total += w
	}
	for _, a := range g.adj {
		slices.SortFunc(a, func(x, y arc) int { return cmp.Compare(x.to, y.to) })
	}
	return g, nil
}

// cross is the weight of the edges between units on different owners.
func (st *state) cross(g *graph) uint64 {
	var c uint64
	for i, as := range g.adj {
		for _, a := range as {
			if a.to > i && st.units[i].owner != st.units[a.to].owner {
				c += a.w
			}
		}
	}
	return c
}

// candidate is a unit's best move as last computed.
type candidate struct {
	unit, to int
	gain     uint64 // weight to the target's units minus to its own owner's
	load     int    // the target's load when computed (ties: the emptier)
	at       int    // heap index
}

type candHeap []*candidate

func (h candHeap) Len() int { return len(h) }
func (h candHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.gain != b.gain {
		return a.gain > b.gain
	}
	if a.load != b.load {
		return a.load < b.load
	}
	return a.unit < b.unit
}
func (h candHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].at = i; h[j].at = j }
func (h *candHeap) Push(x any)   { c := x.(*candidate); c.at = len(*h); *h = append(*h, c) }
func (h *candHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	c.at = -1
	return c
}

// best is unit i's best co-location move: the eligible owner, other than
// its own, to whose units its edges weigh the most, if that is more than
// to its own owner's and the target stays within its limit and the source
// above its floor; ties go to the emptier owner, then the smaller id.
func (st *state) best(g *graph, i int, limit, floor []float64) (candidate, bool) {
	u := st.units[i]
	if !u.movable || float64(st.load[u.owner]-u.size) < floor[u.owner]-1e-9 {
		return candidate{}, false
	}
	w := map[int]uint64{}
	for _, a := range g.adj[i] {
		w[st.units[a.to].owner] += a.w
	}
	home := w[u.owner]
	c := candidate{unit: i, to: -1}
	for t, wt := range w {
		if t == u.owner || wt <= home || !receives(st.owners[t]) || !st.target(u, u.owner, t) ||
			float64(st.load[t]+u.size) > limit[t]+1e-9 {
			continue
		}
		gain := wt - home
		if c.to < 0 || gain > c.gain || gain == c.gain && (st.load[t] < c.load || st.load[t] == c.load && t < c.to) {
			c.to, c.gain, c.load = t, gain, st.load[t]
		}
	}
	return c, c.to >= 0
}

// colocate is step 4: while the budget lasts, the move with the largest
// gain (the traffic it takes off the network) is made, keeping every
// receiving owner within its fair share's tolerance (at most
// fair·(1+tolerance), and a source at least fair·(1−tolerance)); only the
// moved unit's neighbours' gains change, so they alone are computed again.
// Every move strictly lowers the cross-node weight, so the step ends.
func (st *state) colocate(g *graph, fair []float64, tol float64, budget *int, add func(*unit, int, Reason), p *Plan) {
	limit := make([]float64, len(fair))
	floor := make([]float64, len(fair))
	for i, f := range fair {
		limit[i], floor[i] = math.Inf(1), math.Inf(-1)
		if receives(st.owners[i]) {
			limit[i], floor[i] = f*(1+tol), f*(1-tol)
		}
	}
	h := &candHeap{}
	cands := make([]*candidate, len(st.units))
	for i := range st.units {
		if c, ok := st.best(g, i, limit, floor); ok {
			cands[i] = &c
			heap.Push(h, cands[i])
		}
	}
	refresh := func(i int) {
		c, ok := st.best(g, i, limit, floor)
		switch {
		case ok && cands[i] != nil:
			c.at = cands[i].at
			*cands[i] = c
			heap.Fix(h, c.at)
		case ok:
			cands[i] = &c
			heap.Push(h, cands[i])
		case cands[i] != nil:
			heap.Remove(h, cands[i].at)
			cands[i] = nil
		}
	}
	for {
		if h.Len() == 0 {
			// Moves elsewhere may have made room for a unit that is no
			// neighbour of theirs: look at every unit once more.
			for i := range st.units {
				refresh(i)
			}
			if h.Len() == 0 {
				return
			}
		}
		top := (*h)[0]
		// The loads changed since it was computed: compute it again, and
		// take it only if it is still the best of the heap.
		if c, ok := st.best(g, top.unit, limit, floor); !ok || c.to != top.to || c.gain != top.gain || c.load != top.load {
			refresh(top.unit)
			continue
		}
		if *budget == 0 {
			p.BudgetExhausted = true
			return
		}
		u := st.units[top.unit]
		heap.Remove(h, top.at)
		cands[top.unit] = nil
		add(u, top.to, ReasonColocate)
		refresh(top.unit)
		for _, a := range g.adj[top.unit] {
			refresh(a.to)
		}
	}
}

// summarize is Plan.Traffic.
func (g *graph) summarize(before, after uint64) *Traffic {
	return &Traffic{Total: g.total, CrossBefore: before, CrossAfter: after, Edges: g.edges}
}

// memberIndex lists each group's members by the group's name, for the
// graph (members are not units of their own).
func memberIndex(objs map[string]Object) map[string][]string {
	out := map[string][]string{}
	for n, o := range objs {
		if strings.HasPrefix(n, "group/") {
			out[n] = slices.Clone(o.Members)
		}
	}
	return out
}
