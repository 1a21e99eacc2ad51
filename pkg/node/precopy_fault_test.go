//go:build failpoints

package node_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// A pre-copy that fails while the base streams (a chunk's send errors):
// nothing was sealed, the source preserves and the object serves on, with
// every write; the next relocation, without the fault, moves it.
func TestFaultPrecopyBaseFails(t *testing.T) {
	m := precopyMesh(t)
	c := newClient(t, client.Config{Etcd: m.etcd})
	ctx := context.Background()
	const name, size = "actor/blob/basefails", 1 << 20
	if _, err := c.Call(ctx, name, "fill", strconv.Itoa(size), "s"); err != nil {
		t.Fatal(err)
	}
	if st, err := m.owner(t, name).Relocate(ctx, name, node.RelocateOptions{}); err != nil || st.GetOutcome() != "completed" {
		t.Fatalf("first move: %v %+v", err, st)
	}
	w := startWriter(c, name, builtin.BlobContent(size, "s"))
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
// same moves complete.
func TestPlantedDeltaSkipsChunk(t *testing.T) {
	bothWays(t, failpoint.BugDeltaSkipsChunk, func(t *testing.T, planted bool) {
		m := precopyMesh(t)
		c := newClient(t, client.Config{Etcd: m.etcd})
		ctx := context.Background()
		const name, size = "actor/blob/skip", 1 << 20
		if _, err := c.Call(ctx, name, "fill", strconv.Itoa(size), "s"); err != nil {
			t.Fatal(err)
		}
		// A first move tells the nodes the state's size (a state of unknown
		// size is not pre-copied).
		if st, err := m.owner(t, name).Relocate(ctx, name, node.RelocateOptions{}); err != nil || st.GetOutcome() != "completed" {
			t.Fatalf("first move: %v %+v", err, st)
		}
		w := startWriter(c, name, builtin.BlobContent(size, "s"))
		for range 3 {
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
			case planted && (st.GetOutcome() != "aborted" || st.GetCode() != pb.Code_CODE_DATA_LOST || !strings.Contains(st.GetMessage(), "CRC32C")):
				t.Fatalf("a delta without a changed chunk: %s %s %q, want aborted by the CRC32C check", st.GetOutcome(), st.GetCode(), st.GetMessage())
			case planted && m.owner(t, name) != src:
				t.Fatal("the object moved although its relocation was refused")
			}
		}
		w.finish(t)
		w.check(t)
	})
}
