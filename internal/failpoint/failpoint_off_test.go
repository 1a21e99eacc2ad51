//go:build !failpoints

package failpoint

import "testing"

// Without the failpoints build tag nothing can be planted or armed: a
// production binary has no switch.
func TestOffBuildPlantsNothing(t *testing.T) {
	if Enabled {
		t.Fatal("Enabled without the failpoints tag")
	}
	if len(Bugs) != 16 {
		t.Errorf("%d bugs listed, want 16", len(Bugs))
	}
	undo := Plant(Bugs...)
	defer undo()
	t.Setenv("MESHLOC_PLANT", "crc-ignored")
	for _, b := range Bugs {
		if Planted(b) {
			t.Errorf("Planted(%q) is true without the failpoints tag", b)
		}
	}
	if err := Enable(NodeBeforeReply, "error"); err != nil || Hit(NodeBeforeReply) != nil {
		t.Error("a failpoint fired without the failpoints tag")
	}
}
