package rotor

import (
	"slices"
	"testing"
)

func TestRotor(t *testing.T) {
	r := New("list", "pl", 2, 2)
	if got := r.Objects(); !slices.Equal(got, []string{"actor/list/pl0", "actor/list/pl1"}) {
		t.Fatalf("objects %v", got)
	}
	r.Wrote(0, "actor/list/pl0")
	if r.Current(0) != "actor/list/pl0" {
		t.Fatalf("moved after one write")
	}
	r.Wrote(0, "actor/list/pl1") // another slot's object: not counted
	r.Wrote(0, "actor/list/pl0")
	if r.Current(0) != "actor/list/pl0.1" || r.Current(1) != "actor/list/pl1" {
		t.Fatalf("after two writes: %s %s", r.Current(0), r.Current(1))
	}
	r.Wrote(0, "actor/list/pl0") // a late ack of the old object: not counted
	r.Wrote(0, "actor/list/pl0.1")
	if r.Current(0) != "actor/list/pl0.1" {
		t.Fatalf("late ack counted")
	}
	if got := r.Objects(); !slices.Equal(got, []string{"actor/list/pl0", "actor/list/pl1", "actor/list/pl0.1"}) {
		t.Fatalf("objects %v", got)
	}
	never := New("bank", "pb", 1, 0)
	for range 10 {
		never.Wrote(0, "actor/bank/pb0")
	}
	if never.Current(0) != "actor/bank/pb0" {
		t.Fatalf("Every 0 rotated")
	}
}
