package node_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
)

// A state of many chunks moved back and forth: each target receives its
// chunks into pooled buffers, holds the first half as they came, and gives
// every buffer back once it is copied into the payload, so later moves
// (and the other node's) reuse the buffers of earlier ones. Every move
// must restore exactly the bytes that left, whatever a buffer held before.
// The CRC32C cannot catch a buffer given back too early: each chunk's sum
// is computed as it lands, and the payload's is combined from those. This
// check does (the planted bug recycle-early, pooled_fault_test.go).
func TestManyChunkMovesReuseBuffers(t *testing.T) {
	m := startMesh(t, 2)
	if moved, exact := manyChunkMoves(t, m); moved != exact {
		t.Fatalf("%d of %d moves restored other bytes than left", moved-exact, moved)
	}
}

// manyChunkMoves fills a blob of ten chunks (the last short) three times
// with other bytes and moves each three times (with and without pre-copy),
// checking the moved state after each move that completed: how many moves
// completed, and how many of them restored exactly the bytes that left.
func manyChunkMoves(t *testing.T, m *mesh) (moved, exact int) {
	t.Helper()
	const name, size = "actor/blob/pooled", 9<<20 + 12345
	c := newClient(t, client.Config{Etcd: m.etcd})
	ctx := context.Background()
	for i, seed := range []string{"a", "b", "c"} {
		if _, err := c.Call(ctx, name, "fill", strconv.Itoa(size), seed); err != nil {
			t.Fatal(err)
		}
		want := builtin.BlobContent(size, seed)
		for move := range 3 {
			st, err := m.owner(t, name).Relocate(ctx, name, node.RelocateOptions{NoPrecopy: move%2 == 0})
			if err != nil {
				t.Fatalf("fill %d, move %d: %v", i, move, err)
			}
			if st.GetOutcome() != "completed" {
				t.Logf("fill %d, move %d: %s %s %s", i, move, st.GetOutcome(), st.GetCode(), st.GetMessage())
				continue
			}
			moved++
			if blobHolds(t, c, name, want) {
				exact++
			} else if _, err := c.Call(ctx, name, "fill", strconv.Itoa(size), seed); err != nil {
				t.Fatal(err) // start the next move from the bytes it should hold
			}
		}
	}
	return moved, exact
}
