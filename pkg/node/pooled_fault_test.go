//go:build failpoints

package node_test

import (
	"testing"

	"github.com/meshloc/meshloc/internal/failpoint"
)

// TestPlantedRecycleEarly: a target that gives a chunk's pooled buffer
// back as the chunk arrives, before its assembly copied it. Correct: every
// move of a state of many chunks completes and restores exactly what left.
// Planted: some move is refused (a chunk overwritten before it was added
// fails its CRC32C) or restores other bytes (a chunk held as it came,
// overwritten after its CRC32C was checked) — the second the protocol
// cannot see.
func TestPlantedRecycleEarly(t *testing.T) {
	bothWays(t, failpoint.BugRecycleEarly, func(t *testing.T, planted bool) {
		fm := startFaultMesh(t, 2)
		moved, exact := manyChunkMoves(t, fm.mesh)
		switch {
		case !planted && (moved != 9 || exact != 9):
			t.Fatalf("%d of 9 moves completed, %d exact: want all", moved, exact)
		case planted && moved == 9 && exact == 9:
			t.Fatal("every move completed exact: the bug went unseen")
		case planted:
			t.Logf("planted: %d of 9 moves completed, %d of them exact", moved, exact)
		}
	})
}
