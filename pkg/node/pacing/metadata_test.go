package pacing

import (
	"context"
	"math"
	"testing"

	"google.golang.org/grpc/metadata"
)

// A peer's pacing claims are peer bytes: any value gives a claim in range
// or none, never a panic; what a node writes reads back.
func FuzzPacingMetadata(f *testing.F) {
	for _, s := range []string{"1", "65", "1e6", "0", "-1", "NaN", "Inf", "inf", "1e400", "", "0x10", "2.5"} {
		f.Add(s, "1")
	}
	f.Fuzz(func(t *testing.T, units, wait string) {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(mdBackground, units, mdBackgroundWait, wait))
		if u, _, ok := BackgroundOf(ctx); ok && !(u >= 1 && u <= maxUnits) {
			t.Fatalf("claim %q read as %v units", units, u)
		}
		if r, ok := RateOf(metadata.Pairs(mdBackgroundRate, units)); ok && !(math.IsInf(r, 1) || r > 0 && r <= maxUnits) {
			t.Fatalf("rate %q read as %v", units, r)
		}
	})
}

func TestPacingMetadata(t *testing.T) {
	for _, c := range []struct {
		md       metadata.MD
		units    float64
		wait, ok bool
	}{
		{metadata.Pairs(mdBackground, "3.5", mdBackgroundWait, "1"), 3.5, true, true},
		{metadata.Pairs(mdBackground, "1"), 1, false, true},
		{metadata.Pairs(mdBackground, "1", mdBackgroundWait, "yes"), 1, false, true},
		{metadata.Pairs(mdBackground, "0.5"), 0, false, false},
		{metadata.Pairs(mdBackground, "NaN"), 0, false, false},
		{metadata.Pairs(mdBackground, "2e6"), 0, false, false},
		{metadata.Pairs(mdBackground, "1", mdBackground, "2"), 0, false, false},
		{metadata.MD{}, 0, false, false},
	} {
		u, w, ok := BackgroundOf(metadata.NewIncomingContext(context.Background(), c.md))
		if u != c.units || w != c.wait || ok != c.ok {
			t.Errorf("%v: %v %v %v, want %v %v %v", c.md, u, w, ok, c.units, c.wait, c.ok)
		}
	}
	// What a source writes, its target reads.
	out, _ := metadata.FromOutgoingContext(WithBackground(context.Background(), 65, true))
	if u, w, ok := BackgroundOf(metadata.NewIncomingContext(context.Background(), out)); u != 65 || !w || !ok {
		t.Errorf("round trip: %v %v %v", u, w, ok)
	}
	for _, r := range []float64{0.01, 10, math.Inf(1)} {
		if got, ok := RateOf(metadata.Pairs(mdBackgroundRate, formatRate(r))); !ok || got != r {
			t.Errorf("rate %v read back as %v %v", r, got, ok)
		}
	}
	for _, bad := range []string{"0", "-1", "NaN", "+Inf", "1e7", ""} {
		if r, ok := RateOf(metadata.Pairs(mdBackgroundRate, bad)); ok {
			t.Errorf("rate %q read as %v", bad, r)
		}
	}
}
