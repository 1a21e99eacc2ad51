package rebalance

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/meshloc/meshloc/pkg/placement"
)

// ErrInvalidInput is returned by Plan for an input it cannot plan: a budget
// below 1, a tolerance outside [0, 10], an owner or object named twice, or a
// field missing. Nothing is planned.
var ErrInvalidInput = errors.New("rebalance: invalid input")

// Reason says why a move is planned.
type Reason string

// Reasons of a move, in the order the planner considers them.
const (
	// ReasonDrain: the owner is draining.
	ReasonDrain Reason = "drain"
	// ReasonWeight: the owner has weight 0 and still hosts objects.
	ReasonWeight Reason = "weight"
	// ReasonLoad: the owner holds more than its weighted fair share.
	ReasonLoad Reason = "load"
)

// Owner states (the values of lease.NodeState).
const (
	StateServing  = "serving"
	StateDraining = "draining"
	StateJoining  = "joining"
)

// DefaultTolerance is the share above the fair one an owner may hold before
// the load step moves anything away from it (10%).
const DefaultTolerance = 0.1

// MaxBudget bounds Input.Budget.
const MaxBudget = 10000

// Owner is one live owner.
type Owner struct {
	ID                 string
	Weight             int
	State              string // StateServing, StateDraining or StateJoining
	Types              []string
	ApplicationVersion string
}

// Object is one authority record.
type Object struct {
	// Name is canonical: actor/<type>/<id> or group/<id>.
	Name string
	// Owner is the record's owner id.
	Owner string
	// Type of an actor; "" for a group.
	Type   string
	Pinned bool
	// Busy: the record is relocating now; it counts but does not move.
	Busy bool
	// Group of a member actor (a group's name, group/<id>); "" for none.
	Group string
	// Members of a group record (actor names).
	Members []string
}

// Input of Plan.
type Input struct {
	Owners  []Owner
	Objects []Object
	// Budget is the most moves the plan may hold (1..MaxBudget).
	Budget int
	// Tolerance is the share above the fair one allowed (DefaultTolerance: 0.1).
	Tolerance float64
	// Colocate adds step 4 (colocate.go): moves that put the heavy edges
	// of Edges on one owner, keeping every owner within Tolerance of its
	// fair share. Edges name objects of Objects (others are ignored).
	Colocate bool
	Edges    []Edge
}

// Move is one planned relocation.
type Move struct {
	// Object to move: an actor, or a group (its members go with it).
	Object   string
	From, To string
	Reason   Reason
	// Units of load it carries: 1, or 1+members for a group.
	Units int
}

// Load is one owner's load before and after the plan.
type Load struct {
	ID     string
	Weight int
	State  string
	Before int
	After  int
	// Fair is the owner's weighted fair share after the drain and weight
	// steps; 0 for an owner that cannot receive objects.
	Fair float64
}

// Stuck is a unit that should leave its owner (drain, weight) but cannot.
type Stuck struct {
	Object string
	Owner  string
	Reason Reason
	// Why: "pinned", "relocating", "member of a missing group" or "no
	// eligible target".
	Why string
}

// Plan is the planner's answer.
type Plan struct {
	Moves []Move
	// Owners by id.
	Owners []Load
	Stuck  []Stuck
	// BudgetExhausted: more moves were wanted than the budget allowed;
	// planning again after running this plan continues.
	BudgetExhausted bool
	// Traffic is the object graph's cross-owner weight before and after
	// the plan (Input.Colocate only; nil otherwise).
	Traffic *Traffic
}

type unit struct {
	name    string
	owner   int // index in owners
	size    int
	types   []string
	movable bool
	why     string // why not movable
	class   string // size and types
}

type state struct {
	owners []Owner
	load   []int
	units  []*unit
	byOwn  [][]*unit // units each owner held before the plan, by name
	// members of each group, by the group's name (co-location: a member's
	// edges are its group's).
	members map[string][]string
	// classes of the movable units each owner holds now: units alike (size,
	// types) give the same change of Φ, so the first by name stands for
	// all of them; each list is sorted by name.
	classes []map[string][]*unit
	moved   map[string]int // unit name → index of its move in the plan
}

// Make validates in and returns its plan; see the package doc.
func Make(in Input) (Plan, error) {
	st, err := build(in)
	if err != nil {
		return Plan{}, err
	}
	var g *graph
	var crossBefore uint64
	if in.Colocate {
		if g, err = st.graph(in.Edges); err != nil {
			return Plan{}, err
		}
		crossBefore = st.cross(g)
	}
	p := Plan{}
	before := slices.Clone(st.load)
	budget := in.Budget
	// add moves u to owner to. A unit moved again in the same plan keeps one
	// move, from where it was to where it ends (with its first reason), so no
	// object is named twice; a unit that ends where it started has no move.
	add := func(u *unit, to int, r Reason) {
		from := u.owner
		st.load[from] -= u.size
		st.load[to] += u.size
		u.owner = to
		st.file(u, from, to)
		if i, again := st.moved[u.name]; again {
			p.Moves[i].To = st.owners[to].ID
			if p.Moves[i].To == p.Moves[i].From {
				p.Moves[i].Object = "" // removed below
				delete(st.moved, u.name)
				budget++
			}
			return
		}
		st.moved[u.name] = len(p.Moves)
		p.Moves = append(p.Moves, Move{Object: u.name, From: st.owners[from].ID, To: st.owners[to].ID, Reason: r, Units: u.size})
		budget--
	}

	// Steps 1 and 2: evacuate draining owners, then weight-0 owners.
	for _, r := range []Reason{ReasonDrain, ReasonWeight} {
		for i, o := range st.owners {
			if evacuates(o) != r {
				continue
			}
			for _, u := range st.byOwn[i] {
				if u.owner != i {
					continue
				}
				if !u.movable {
					p.Stuck = append(p.Stuck, Stuck{Object: u.name, Owner: o.ID, Reason: r, Why: u.why})
					continue
				}
				to := st.emptiest(u, i)
				if to < 0 {
					p.Stuck = append(p.Stuck, Stuck{Object: u.name, Owner: o.ID, Reason: r, Why: "no eligible target"})
					continue
				}
				if budget == 0 {
					p.BudgetExhausted = true
					continue
				}
				add(u, to, r)
			}
		}
	}

	// Step 3: load.
	fair, limit := st.fairShares(in.Tolerance)
	for !p.BudgetExhausted {
		u, to, ok := st.bestLoadMove(limit)
		if !ok {
			break
		}
		if budget == 0 {
			p.BudgetExhausted = true
			break
		}
		add(u, to, ReasonLoad)
	}

	// Step 4: co-location.
	if g != nil {
		if !p.BudgetExhausted {
			st.colocate(g, fair, in.Tolerance, &budget, add, &p)
		}
		p.Traffic = g.summarize(crossBefore, st.cross(g))
	}

	p.Moves = slices.DeleteFunc(p.Moves, func(m Move) bool { return m.Object == "" })
	for i, o := range st.owners {
		p.Owners = append(p.Owners, Load{ID: o.ID, Weight: o.Weight, State: o.State, Before: before[i], After: st.load[i], Fair: fair[i]})
	}
	return p, nil
}

// file moves u from owner from's classes to owner to's.
func (st *state) file(u *unit, from, to int) {
	if !u.movable {
		return
	}
	cmpName := func(x *unit, n string) int { return strings.Compare(x.name, n) }
	if l := st.classes[from][u.class]; len(l) > 0 {
		if i, found := slices.BinarySearchFunc(l, u.name, cmpName); found && i == 0 {
			st.classes[from][u.class] = l[1:] // the load step always takes the first
		} else if found {
			st.classes[from][u.class] = slices.Delete(l, i, i+1)
		}
	}
	l := st.classes[to][u.class]
	i, _ := slices.BinarySearchFunc(l, u.name, cmpName)
	st.classes[to][u.class] = slices.Insert(l, i, u)
}

// evacuates is the reason every unit must leave o, or "".
func evacuates(o Owner) Reason {
	switch {
	case o.State == StateDraining:
		return ReasonDrain
	case o.Weight <= 0:
		return ReasonWeight
	}
	return ""
}

// receives reports whether o may receive objects at all.
func receives(o Owner) bool { return o.State == StateServing && o.Weight > 0 }

// target reports whether owner t may receive unit u from owner s.
func (st *state) target(u *unit, s, t int) bool {
	if s == t {
		return false
	}
	so, to := st.owners[s], st.owners[t]
	return placement.Eligible(placement.Candidate{ID: to.ID, Serving: to.State == StateServing, Weight: to.Weight, Types: to.Types, Version: to.ApplicationVersion},
		placement.Need{Types: u.types, Version: so.ApplicationVersion, From: so.ID})
}

// emptiest is the eligible target with the least (load+size)/weight after
// the move (ties: smaller id), or -1.
func (st *state) emptiest(u *unit, from int) int {
	best, bestR := -1, 0.0
	for t := range st.owners {
		if !st.target(u, from, t) {
			continue
		}
		r := float64(st.load[t]+u.size) / float64(st.owners[t].Weight)
		if best < 0 || r < bestR {
			best, bestR = t, r
		}
	}
	return best
}

// fairShares computes each owner's fair share of the load held by the owners
// that can receive objects, and the limit above which the load step acts.
func (st *state) fairShares(tol float64) (fair, limit []float64) {
	fair = make([]float64, len(st.owners))
	limit = make([]float64, len(st.owners))
	total, weights := 0, 0
	for i, o := range st.owners {
		if receives(o) {
			total += st.load[i]
			weights += o.Weight
		}
	}
	for i, o := range st.owners {
		limit[i] = math.Inf(1)
		if receives(o) && weights > 0 {
			fair[i] = float64(total) * float64(o.Weight) / float64(weights)
			limit[i] = fair[i] * (1 + tol)
		}
	}
	return fair, limit
}

// bestLoadMove finds the load step's next move: for the overloaded owners in
// order of load per weight (highest first, then id), the (unit, target) that
// lowers Φ = Σ load²/weight the most; the first owner that has one gives it.
func (st *state) bestLoadMove(limit []float64) (*unit, int, bool) {
	var srcs []int
	for i, o := range st.owners {
		if receives(o) && float64(st.load[i]) > limit[i]+1e-9 {
			srcs = append(srcs, i)
		}
	}
	slices.SortFunc(srcs, func(a, b int) int {
		ra := float64(st.load[a]) / float64(st.owners[a].Weight)
		rb := float64(st.load[b]) / float64(st.owners[b].Weight)
		if c := cmp.Compare(rb, ra); c != 0 {
			return c
		}
		return strings.Compare(st.owners[a].ID, st.owners[b].ID)
	})
	for _, s := range srcs {
		ws := float64(st.owners[s].Weight)
		ls := float64(st.load[s])
		var bu *unit
		bt, bd := -1, 0.0
		keys := make([]string, 0, len(st.classes[s]))
		for k, l := range st.classes[s] {
			if len(l) > 0 {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			u := st.classes[s][k][0]
			z := float64(u.size)
			for t := range st.owners {
				if !receives(st.owners[t]) || !st.target(u, s, t) {
					continue
				}
				wt, lt := float64(st.owners[t].Weight), float64(st.load[t])
				d := (z*z-2*ls*z)/ws + (z*z+2*lt*z)/wt
				if d >= -1e-9 {
					continue
				}
				better := bu == nil || d < bd-1e-9
				if !better && d <= bd+1e-9 { // a tie: the smaller owner id, then the smaller object name
					better = t < bt || t == bt && u.name < bu.name
				}
				if better {
					bu, bt, bd = u, t, d
				}
			}
		}
		if bu != nil {
			return bu, bt, true
		}
	}
	return nil, -1, false
}

// build validates the input and makes the units, sorted by owner then name.
func build(in Input) (*state, error) {
	if in.Budget < 1 || in.Budget > MaxBudget {
		return nil, fmt.Errorf("%w: budget %d (want 1..%d)", ErrInvalidInput, in.Budget, MaxBudget)
	}
	if math.IsNaN(in.Tolerance) || in.Tolerance < 0 || in.Tolerance > 10 {
		return nil, fmt.Errorf("%w: tolerance %v (want 0..10)", ErrInvalidInput, in.Tolerance)
	}
	owners := slices.Clone(in.Owners)
	slices.SortFunc(owners, func(a, b Owner) int { return strings.Compare(a.ID, b.ID) })
	idx := map[string]int{}
	for i, o := range owners {
		if o.ID == "" {
			return nil, fmt.Errorf("%w: an owner without id", ErrInvalidInput)
		}
		if _, dup := idx[o.ID]; dup {
			return nil, fmt.Errorf("%w: owner %s given twice", ErrInvalidInput, o.ID)
		}
		idx[o.ID] = i
	}
	objs := map[string]Object{}
	for _, ob := range in.Objects {
		if ob.Name == "" || ob.Owner == "" {
			return nil, fmt.Errorf("%w: object %q without name or owner", ErrInvalidInput, ob.Name)
		}
		if _, dup := objs[ob.Name]; dup {
			return nil, fmt.Errorf("%w: object %s given twice", ErrInvalidInput, ob.Name)
		}
		objs[ob.Name] = ob
	}
	names := make([]string, 0, len(objs))
	for n := range objs {
		names = append(names, n)
	}
	slices.Sort(names)

	st := &state{owners: owners, load: make([]int, len(owners)), byOwn: make([][]*unit, len(owners)), moved: map[string]int{},
		classes: make([]map[string][]*unit, len(owners))}
	for i := range owners {
		st.classes[i] = map[string][]*unit{}
	}
	st.members = memberIndex(objs)
	for _, n := range names {
		ob := objs[n]
		oi, live := idx[ob.Owner]
		if !live {
			continue // an orphan: not ours
		}
		isGroup := strings.HasPrefix(n, "group/")
		var u *unit
		switch {
		case isGroup:
			u = &unit{name: n, owner: oi, size: 1 + len(ob.Members), movable: !ob.Pinned && !ob.Busy}
			types := map[string]bool{}
			for _, m := range ob.Members {
				mo, ok := objs[m]
				t := memberType(m)
				if ok && mo.Type != "" {
					t = mo.Type
				}
				if t != "" {
					types[t] = true
				}
				if ok && (mo.Pinned || mo.Busy) {
					u.movable = false
				}
			}
			for t := range types {
				u.types = append(u.types, t)
			}
			slices.Sort(u.types)
		case ob.Group != "":
			if g, ok := objs[ob.Group]; ok && slices.Contains(g.Members, n) {
				continue // counted and moved with its group
			}
			u = &unit{name: n, owner: oi, size: 1, types: []string{ob.Type}, why: "member of a missing group"}
		default:
			u = &unit{name: n, owner: oi, size: 1, types: []string{ob.Type}, movable: !ob.Pinned && !ob.Busy}
		}
		if u.why == "" && !u.movable {
			u.why = "pinned"
			if !anyPinned(ob, objs) {
				u.why = "relocating"
			}
		}
		st.units = append(st.units, u)
		st.byOwn[oi] = append(st.byOwn[oi], u)
		if u.movable {
			u.class = fmt.Sprint(u.size, u.types)
			st.classes[oi][u.class] = append(st.classes[oi][u.class], u) // names come sorted
		}
		st.load[oi] += u.size
	}
	return st, nil
}

func anyPinned(ob Object, objs map[string]Object) bool {
	if ob.Pinned {
		return true
	}
	for _, m := range ob.Members {
		if objs[m].Pinned {
			return true
		}
	}
	return false
}

// memberType is the type of an actor name actor/<type>/<id>, or "".
func memberType(name string) string {
	parts := strings.Split(name, "/")
	if len(parts) == 3 && parts[0] == "actor" {
		return parts[1]
	}
	return ""
}
