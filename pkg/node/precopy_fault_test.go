//go:build failpoints

package node_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

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
		r, err := c.Call(ctx, name, "hash")
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			SHA256 string `json:"sha256"`
		}
		if err := json.Unmarshal(r.Payload, &got); err != nil {
			t.Fatal(err)
		}
		if want := sha256.Sum256(w.model); got.SHA256 != hex.EncodeToString(want[:]) {
			t.Fatalf("after %d acknowledged writes the blob is not what they wrote", w.acked)
		}
	})
}
