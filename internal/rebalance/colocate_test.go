package rebalance

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// pairs returns n pairs of actors p<i>a, p<i>b that message each other,
// placed by place(i) (the owners of a and b), and their edges.
func pairs(n int, place func(i int) (string, string)) ([]Object, []Edge) {
	var objs []Object
	var edges []Edge
	for i := range n {
		a, b := fmt.Sprintf("actor/pp/p%04da", i), fmt.Sprintf("actor/pp/p%04db", i)
		oa, ob := place(i)
		objs = append(objs, Object{Name: a, Owner: oa, Type: "pp"}, Object{Name: b, Owner: ob, Type: "pp"})
		edges = append(edges, Edge{From: a, To: b, Weight: 10}, Edge{From: b, To: a, Weight: 10})
	}
	return objs, edges
}

func ownerOf(p Plan, in Input, obj string) string {
	if m, ok := moveOf(p, obj); ok {
		return m.To
	}
	for _, o := range in.Objects {
		if o.Name == obj {
			return o.Owner
		}
	}
	return ""
}

// checkColocate asserts what step 4 promises on top of check: its moves
// never make the cross weight grow, every receiving owner ends within its limit (if the
// load step could get it there), and the plan converges.
func checkColocate(t *testing.T, in Input, p Plan) {
	t.Helper()
	check(t, in, p)
	if p.Traffic == nil {
		t.Fatal("no traffic summary")
	}
	if p.Traffic.CrossAfter > p.Traffic.CrossBefore && reasons(p)[ReasonColocate] == len(p.Moves) {
		t.Fatalf("co-location made the cross weight grow: %+v", *p.Traffic) // (drain and load moves may)
	}
	// (Drain moves go to the emptiest owner and load moves wherever Φ
	// falls, whatever the limit: the promise is co-location's.)
	onlyColocate := reasons(p)[ReasonColocate] == len(p.Moves)
	for _, o := range p.Owners {
		if onlyColocate && o.Fair > 0 && float64(o.After) > o.Fair*(1+in.Tolerance)+1e-9 && o.After > o.Before {
			t.Fatalf("owner %s over its limit: %+v (tolerance %v)\nmoves %+v\nowners %+v", o.ID, o, in.Tolerance, p.Moves, p.Owners)
		}
	}
	if !p.BudgetExhausted {
		again := mustMake(t, apply(in, p))
		if len(again.Moves) != 0 {
			t.Fatalf("not converged: %+v after %+v", again.Moves, p.Moves)
		}
	}
}

func TestColocateTable(t *testing.T) {
	two := []Owner{serving("n1", 1), serving("n2", 1)}
	cases := []struct {
		name  string
		in    Input
		check func(t *testing.T, in Input, p Plan)
	}{
		{
			name: "split pairs come together, loads stay even",
			in: func() Input {
				objs, edges := pairs(20, func(i int) (string, string) {
					if i%2 == 0 {
						return "n1", "n2"
					}
					return "n2", "n1"
				})
				return Input{Owners: two, Objects: objs, Edges: edges}
			}(),
			check: func(t *testing.T, in Input, p Plan) {
				if p.Traffic.CrossAfter != 0 || p.Traffic.CrossBefore != 20*20 || len(p.Moves) != 20 {
					t.Fatalf("traffic %+v, %d moves", *p.Traffic, len(p.Moves))
				}
				if got := loads(p); got != "n1=20 n2=20" {
					t.Fatalf("loads %s", got)
				}
				if reasons(p)[ReasonColocate] != 20 {
					t.Fatalf("reasons %v", reasons(p))
				}
			},
		},
		{
			name: "a full target takes nothing",
			in: func() Input {
				// n1 holds 10 a's, n2 their 10 b's and 10 loners: moving a
				// b to n1 would put it over 10·1.1.
				objs, edges := pairs(10, func(int) (string, string) { return "n2", "n1" })
				objs = append(objs, counters("n2", 0, 10)...)
				return Input{Owners: two, Objects: objs, Edges: edges}
			}(),
			check: func(t *testing.T, in Input, p Plan) {
				for _, o := range p.Owners {
					if o.After > 16 { // fair 15, limit 16.5
						t.Fatalf("owner %+v over its limit", o)
					}
				}
				if p.Traffic.CrossAfter >= p.Traffic.CrossBefore {
					t.Fatalf("nothing co-located: %+v", *p.Traffic)
				}
			},
		},
		{
			name: "a pinned object draws its partner, and stays",
			in: Input{Owners: two, Objects: []Object{
				{Name: "actor/pp/a", Owner: "n1", Type: "pp", Pinned: true}, {Name: "actor/pp/b", Owner: "n2", Type: "pp"},
				{Name: "actor/pp/c", Owner: "n2", Type: "pp"}, {Name: "actor/pp/d", Owner: "n1", Type: "pp"},
			}, Edges: []Edge{{From: "actor/pp/b", To: "actor/pp/a", Weight: 5}}, Tolerance: 0.5},
			check: func(t *testing.T, in Input, p Plan) {
				if m, ok := moveOf(p, "actor/pp/b"); !ok || m.To != "n1" || len(p.Moves) != 1 {
					t.Fatalf("moves %+v", p.Moves)
				}
			},
		},
		{
			name: "a member's edges are its group's, and the group moves whole",
			in: Input{Owners: []Owner{serving("n1", 1), serving("n2", 1)}, Objects: []Object{
				{Name: "group/g", Owner: "n1", Members: []string{"actor/pp/m1", "actor/pp/m2"}},
				{Name: "actor/pp/m1", Owner: "n1", Type: "pp", Group: "group/g"},
				{Name: "actor/pp/m2", Owner: "n1", Type: "pp", Group: "group/g"},
				{Name: "actor/pp/x", Owner: "n2", Type: "pp"}, {Name: "actor/pp/y", Owner: "n2", Type: "pp"},
				{Name: "actor/pp/z", Owner: "n2", Type: "pp"},
			}, Tolerance: 0.5, Edges: []Edge{{From: "actor/pp/m1", To: "actor/pp/x", Weight: 3}, {From: "actor/pp/x", To: "actor/pp/m2", Weight: 3}}},
			check: func(t *testing.T, in Input, p Plan) {
				if m, ok := moveOf(p, "actor/pp/x"); !ok || m.To != "n1" {
					t.Fatalf("x should join the group's node: %+v", p.Moves)
				}
				if _, ok := moveOf(p, "actor/pp/m1"); ok {
					t.Fatal("a member moved alone")
				}
			},
		},
		{
			name: "an owner that lacks the type is no target",
			in: Input{Owners: []Owner{serving("n1", 1), {ID: "n2", Weight: 1, State: StateServing, ApplicationVersion: "v1", Types: []string{"other"}}},
				Objects: []Object{{Name: "actor/pp/a", Owner: "n1", Type: "pp"}, {Name: "actor/other/b", Owner: "n2", Type: "other"}},
				Edges:   []Edge{{From: "actor/pp/a", To: "actor/other/b", Weight: 9}}, Tolerance: 1},
			check: func(t *testing.T, in Input, p Plan) {
				if m, ok := moveOf(p, "actor/other/b"); !ok || m.To != "n1" || len(p.Moves) != 1 {
					t.Fatalf("moves %+v", p.Moves)
				}
			},
		},
		{
			name: "edges to unknown objects and self-loops count for nothing",
			in: Input{Owners: two, Objects: []Object{{Name: "actor/pp/a", Owner: "n1", Type: "pp"}},
				Edges: []Edge{{From: "actor/pp/a", To: "actor/pp/gone", Weight: 9}, {From: "actor/pp/a", To: "actor/pp/a", Weight: 9}}},
			check: func(t *testing.T, in Input, p Plan) {
				if len(p.Moves) != 0 || p.Traffic.Total != 0 || p.Traffic.Edges != 0 {
					t.Fatalf("moves %+v traffic %+v", p.Moves, *p.Traffic)
				}
			},
		},
		{
			name: "the budget stops it",
			in: func() Input {
				objs, edges := pairs(10, func(i int) (string, string) {
					if i%2 == 0 {
						return "n1", "n2"
					}
					return "n2", "n1"
				})
				return Input{Owners: two, Objects: objs, Edges: edges, Budget: 3}
			}(),
			check: func(t *testing.T, in Input, p Plan) {
				if len(p.Moves) != 3 || !p.BudgetExhausted || p.Traffic.CrossAfter != 7*20 {
					t.Fatalf("%d moves, exhausted %v, traffic %+v", len(p.Moves), p.BudgetExhausted, *p.Traffic)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := c.in
			in.Colocate = true
			if in.Budget == 0 {
				in.Budget = MaxBudget
			}
			if in.Tolerance == 0 {
				in.Tolerance = DefaultTolerance
			}
			p := mustMake(t, in)
			checkColocate(t, in, p)
			c.check(t, in, p)
		})
	}
}

func TestColocateInvalidEdges(t *testing.T) {
	in := Input{Owners: []Owner{serving("n1", 1)}, Budget: 1, Colocate: true, Edges: []Edge{{From: "", To: "actor/x/y", Weight: 1}}}
	if _, err := Make(in); err == nil {
		t.Fatal("an edge without from accepted")
	}
	objs := []Object{{Name: "actor/x/a", Owner: "n1", Type: "x"}, {Name: "actor/x/b", Owner: "n1", Type: "x"}}
	in = Input{Owners: []Owner{serving("n1", 1)}, Objects: objs, Budget: 1, Colocate: true,
		Edges: []Edge{{From: "actor/x/a", To: "actor/x/b", Weight: math.MaxUint64}, {From: "actor/x/b", To: "actor/x/a", Weight: 2}}}
	if _, err := Make(in); err == nil {
		t.Fatal("overflowing weights accepted")
	}
}

// 1000 pairs at random over 3 owners: nearly all pairs end on one owner,
// within the tolerance (the bench's plan).
func TestColocateRandomPairs(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	owners := []Owner{serving("n1", 1), serving("n2", 1), serving("n3", 1)}
	ids := []string{"n1", "n2", "n3"}
	objs, edges := pairs(1000, func(int) (string, string) { return ids[r.IntN(3)], ids[r.IntN(3)] })
	in := Input{Owners: owners, Objects: objs, Edges: edges, Budget: MaxBudget, Tolerance: DefaultTolerance, Colocate: true}
	p := mustMake(t, in)
	checkColocate(t, in, p)
	if f := p.Traffic.FractionAfter(); f > 0.1*p.Traffic.FractionBefore() {
		t.Fatalf("cross fraction %.3f → %.3f", p.Traffic.FractionBefore(), f)
	}
	t.Logf("cross fraction %.3f → %.3f in %d moves; loads %s", p.Traffic.FractionBefore(), p.Traffic.FractionAfter(), len(p.Moves), loads(p))
}

// Random graphs and owners: the invariants of check and checkColocate.
func TestColocateRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for iter := range 300 {
		var in Input
		n := 1 + r.IntN(5)
		for i := range n {
			o := serving(fmt.Sprintf("n%d", i), 1+r.IntN(3))
			if r.IntN(6) == 0 {
				o.State = StateDraining
			}
			in.Owners = append(in.Owners, o)
		}
		objs := r.IntN(60)
		for i := range objs {
			in.Objects = append(in.Objects, Object{Name: fmt.Sprintf("actor/pp/o%d", i), Owner: in.Owners[r.IntN(n)].ID, Type: "pp", Pinned: r.IntN(20) == 0})
		}
		for range r.IntN(200) {
			if objs == 0 {
				break
			}
			in.Edges = append(in.Edges, Edge{From: fmt.Sprintf("actor/pp/o%d", r.IntN(objs)), To: fmt.Sprintf("actor/pp/o%d", r.IntN(objs)), Weight: uint64(1 + r.IntN(100))})
		}
		in.Budget, in.Tolerance, in.Colocate = 1+r.IntN(100), []float64{0.1, 0.25, 0.5}[r.IntN(3)], true
		p, err := Make(in)
		if err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		checkColocate(t, in, p)
		if q, _ := Make(in); fmt.Sprint(p.Moves, p.Owners, *p.Traffic) != fmt.Sprint(q.Moves, q.Owners, *q.Traffic) {
			t.Fatalf("iter %d: not deterministic", iter)
		}
	}
}

// BenchmarkColocateMillionEdges: 200,000 objects over 10 owners and
// 1,000,000 edges (each object messages 5 others of its own cluster of
// 20, placed at random), the largest budget.
func BenchmarkColocateMillionEdges(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	in := Input{Budget: MaxBudget, Tolerance: DefaultTolerance, Colocate: true}
	for i := range 10 {
		in.Owners = append(in.Owners, serving(fmt.Sprintf("n%d", i), 1))
	}
	const objects, cluster = 200_000, 20
	for i := range objects {
		in.Objects = append(in.Objects, Object{Name: fmt.Sprintf("actor/pp/o%06d", i), Owner: fmt.Sprintf("n%d", r.IntN(10)), Type: "pp"})
	}
	for i := range objects {
		base := i / cluster * cluster
		for range 5 {
			j := base + r.IntN(cluster)
			in.Edges = append(in.Edges, Edge{From: in.Objects[i].Name, To: in.Objects[j].Name, Weight: uint64(1 + r.IntN(10))})
		}
	}
	b.ReportMetric(float64(len(in.Edges)), "edges")
	for b.Loop() {
		p, err := Make(in)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(p.Traffic.FractionBefore(), "cross-before")
		b.ReportMetric(p.Traffic.FractionAfter(), "cross-after")
		b.ReportMetric(float64(len(p.Moves)), "moves")
	}
}
