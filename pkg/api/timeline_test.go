package api

import (
	"reflect"
	"testing"
)

func TestPhases(t *testing.T) {
	src := &Relocation{Timeline: []TimelineMark{
		{"intent", 100}, {"seal", 300}, {"state", 350}, {"ready", 400}, {"cutover", 900}, {"commit", 950}, {"settle", 1500}, {"done", 1600},
	}}
	tgt := &Relocation{Timeline: []TimelineMark{
		{"state", 360}, {"ready", 420}, {"cutover", 880}, {"commit", 960}, {"admission", 1400}, {"settle", 1450}, {"done", 1460},
	}}
	got := Phases(src, tgt)
	want := []PhaseTime{
		{"intent", 200, 0, 100, 0},
		{"seal", 50, 0, 300, 0},
		{"state", 50, 60, 350, 360},
		{"ready", 500, 460, 400, 420},
		{"cutover", 50, 80, 900, 880},
		{"commit", 550, 440, 950, 960},
		{"admission", 0, 50, 0, 1400},
		{"settle", 100, 10, 1500, 1450},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Phases:\n got %+v\nwant %+v", got, want)
	}
	// One side only, in flight (the last step has no end yet), and the
	// optional phases where they happened.
	got = Phases(&Relocation{Timeline: []TimelineMark{{"intent", 1}, {"precopy", 5}, {"seal", 9}}}, nil)
	if len(got) != 9 || got[1].Phase != "precopy" || got[1].SourceMicros != 4 || got[2].SourceMicros != 0 || got[2].SourceStartUnixMicros != 9 {
		t.Errorf("in flight: %+v", got)
	}
	if got := Phases(nil, nil); len(got) != 8 {
		t.Errorf("no sides: %d phases, want the 8 of every relocation", len(got))
	}
}
