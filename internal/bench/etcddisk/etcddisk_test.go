package etcddisk

import "testing"

// TestDiskOpsSince: the operations after a first reading, how many took
// over a second, and the bound all of them took under.
func TestDiskOpsSince(t *testing.T) {
	bounds := []float64{0.001, 0.5, 1.024, 2.048, 4.096}
	before := diskOps{count: 10, bounds: bounds, cum: []uint64{8, 10, 10, 10, 10}}
	after := diskOps{count: 20, bounds: bounds, cum: []uint64{12, 15, 17, 19, 19}}
	if got, want := after.since(before), "10, 3 over 1 s, all under +Infs"; got != want {
		t.Errorf("since = %q, want %q", got, want)
	}
	after.cum[4] = 20
	if got, want := after.since(before), "10, 3 over 1 s, all under 4.096s"; got != want {
		t.Errorf("since = %q, want %q", got, want)
	}
	if got, want := before.since(before), "0, 0 over 1 s, all under 0.001s"; got != want {
		t.Errorf("since of nothing = %q, want %q", got, want)
	}
}
