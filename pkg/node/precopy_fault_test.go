//go:build failpoints

package node_test

import (
	"context"
	"strings"
	"testing"

	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/pkg/node"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// A pre-copy that fails while the base streams (a chunk's send errors):
// nothing was sealed, the source preserves and the object serves on, with
// every write; the next relocation, without the fault, moves it.
func TestFaultPrecopyBaseFails(t *testing.T) {
	const name = "actor/blob/basefails"
	m, w := writtenBlob(t, name, true)
	ctx := context.Background()
	arm(t, failpoint.SourceChunk, "error%7")
	src := m.owner(t, name)
	st, err := src.Relocate(ctx, name, node.RelocateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetOutcome() != "aborted" || st.GetSealedUnixUs() != 0 || m.owner(t, name) != src {
		t.Fatalf("a pre-copy whose base failed: %s %s %q (sealed at %d), want aborted before the seal, still on the source",
			st.GetOutcome(), st.GetCode(), st.GetMessage(), st.GetSealedUnixUs())
	}
	failpoint.Reset()
	if st, err := src.Relocate(ctx, name, node.RelocateOptions{}); err != nil || st.GetOutcome() != "completed" {
		t.Fatalf("the next move: %v %+v", err, st)
	}
	w.finish(t)
	w.check(t)
}

// TestPlantedDeltaSkipsChunk: a pre-copy whose SEALED leaves out a changed
// chunk (and never sends it) is caught by the target's check of the final
// payload's CRC32C: the relocation is refused with DATA_LOST, the source
// keeps the object, and every acknowledged write is in it. Correct, the
// same moves complete. (A move during whose pre-copy no write landed has
// no changed chunk for the bug to leave out: it completes, having sent
// nothing after the seal; the moves go on until the bug acted twice.)
func TestPlantedDeltaSkipsChunk(t *testing.T) {
	bothWays(t, failpoint.BugDeltaSkipsChunk, func(t *testing.T, planted bool) {
		const name, size = "actor/blob/skip", blobSize
		m, w := writtenBlob(t, name, true)
		ctx := context.Background()
		refused := 0
		for moves := 0; moves < 3 || (planted && refused < 2 && moves < 20); moves++ {
			src := m.owner(t, name)
			st, err := src.Relocate(ctx, name, node.RelocateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if st.GetPrecopyBytes() < size {
				t.Fatalf("no pre-copy: %+v", st)
			}
			switch {
			case !planted && st.GetOutcome() != "completed":
				t.Fatalf("relocation %+v", st)
			case planted && st.GetOutcome() == "completed" && st.GetSealedBytes() == 0:
				// nothing changed: nothing to leave out
			case planted && (st.GetOutcome() != "aborted" || st.GetCode() != pb.Code_CODE_DATA_LOST || !strings.Contains(st.GetMessage(), "CRC32C")):
				t.Fatalf("a delta without a changed chunk: %s %s %q, want aborted by the CRC32C check", st.GetOutcome(), st.GetCode(), st.GetMessage())
			case planted && m.owner(t, name) != src:
				t.Fatal("the object moved although its relocation was refused")
			case planted:
				refused++
			}
		}
		if planted && refused < 2 {
			t.Fatalf("the bug acted in %d moves, want 2", refused)
		}
		w.finish(t)
		w.check(t)
	})
}
