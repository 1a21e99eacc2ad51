package report

import "testing"

func TestTargetMet(t *testing.T) {
	for _, c := range []struct {
		t     Target
		ratio float64
		met   bool
	}{
		{Target{Op: "<=", Ratio: 2}, 1.9, true}, {Target{Op: "<=", Ratio: 2}, 2, true}, {Target{Op: "<=", Ratio: 2}, 2.1, false},
		{Target{Op: ">=", Ratio: 0.5}, 0.6, true}, {Target{Op: ">=", Ratio: 0.5}, 0.4, false}, {Target{}, 1, false},
	} {
		if got := c.t.Met(c.ratio); got != c.met {
			t.Errorf("%v.Met(%v) = %v", c.t, c.ratio, got)
		}
	}
}

func TestFigure(t *testing.T) {
	f := NewFigure(Measure{Name: "x", Value: 3, Unit: "ms"}, Measure{Name: "b", Value: 2, Unit: "ms"}, AtMost(2))
	if f.Ratio != 1.5 || f.Met == nil || !*f.Met {
		t.Fatalf("%+v", f)
	}
	// A baseline that was not measured meets nothing.
	f = NewFigure(Measure{Name: "x", Value: 3}, Measure{Name: "b"}, AtLeast(0.5))
	if f.Ratio != 0 || *f.Met {
		t.Fatalf("%+v", f)
	}
	if f := NewFigure(Measure{Value: 1}, Measure{Value: 1}, nil); f.Met != nil {
		t.Fatal("a figure without a target is marked")
	}
}
