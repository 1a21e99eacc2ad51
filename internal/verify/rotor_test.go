package verify

import (
	"slices"
	"testing"
)

func TestRotor(t *testing.T) {
	r := newRotor("list", "pl", 2, 2)
	if got := r.objects(); !slices.Equal(got, []string{"actor/list/pl0", "actor/list/pl1"}) {
		t.Fatalf("objects %v", got)
	}
	r.wrote(0, "actor/list/pl0")
	if r.current(0) != "actor/list/pl0" {
		t.Fatalf("moved after one write")
	}
	r.wrote(0, "actor/list/pl1") // another slot's object: not counted
	r.wrote(0, "actor/list/pl0")
	if r.current(0) != "actor/list/pl0.1" || r.current(1) != "actor/list/pl1" {
		t.Fatalf("after two writes: %s %s", r.current(0), r.current(1))
	}
	r.wrote(0, "actor/list/pl0") // a late ack of the old object: not counted
	r.wrote(0, "actor/list/pl0.1")
	if r.current(0) != "actor/list/pl0.1" {
		t.Fatalf("late ack counted")
	}
	if got := r.objects(); !slices.Equal(got, []string{"actor/list/pl0", "actor/list/pl1", "actor/list/pl0.1"}) {
		t.Fatalf("objects %v", got)
	}
	never := newRotor("bank", "pb", 1, 0)
	for range 10 {
		never.wrote(0, "actor/bank/pb0")
	}
	if never.current(0) != "actor/bank/pb0" {
		t.Fatalf("Every 0 rotated")
	}
}
