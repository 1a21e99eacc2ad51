package node_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"

	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
)

// precopyMesh: two nodes that pre-copy states of 256 KiB and more, in
// chunks of 16 KiB.
func precopyMesh(t *testing.T) *mesh {
	return startMesh(t, 2, func(_ int, c *node.Config) {
		c.ChunkBytes, c.PrecopyMinBytes = 16<<10, 256<<10
	})
}

// writer writes 8 random bytes at random offsets of the first 64 KiB of
// a blob (its hot part), one write after the other, until stop; model holds the blob as the
// acknowledged writes left it (a write's answer is its proof).
type writer struct {
	c     *client.Client
	name  string
	model []byte
	acked int
	stop  chan struct{}
	done  sync.WaitGroup
	err   error
}

// writtenBlob starts a precopyMesh, fills name with a 1 MiB blob, moves
// it once when known (the nodes then know its size: a state of unknown
// size is not pre-copied), and starts a writer on it.
func writtenBlob(t *testing.T, name string, known bool) (*mesh, *writer) {
	t.Helper()
	m := precopyMesh(t)
	c := newClient(t, client.Config{Etcd: m.etcd})
	ctx := context.Background()
	if _, err := c.Call(ctx, name, "fill", strconv.Itoa(blobSize), "s"); err != nil {
		t.Fatal(err)
	}
	if known {
		if st, err := m.owner(t, name).Relocate(ctx, name, node.RelocateOptions{}); err != nil || st.GetOutcome() != "completed" {
			t.Fatalf("first move: %v %+v", err, st)
		}
	}
	return m, startWriter(c, name, builtin.BlobContent(blobSize, "s"))
}

// blobSize is the state of writtenBlob.
const blobSize = 1 << 20

func startWriter(c *client.Client, name string, model []byte) *writer {
	w := &writer{c: c, name: name, model: model, stop: make(chan struct{})}
	w.done.Go(func() {
		r := rand.New(rand.NewPCG(7, 7))
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			off := r.IntN(min(len(w.model), 64<<10) - 8)
			b := make([]byte, 8)
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			if _, err := w.c.Call(context.Background(), w.name, "write", strconv.Itoa(off), string(b)); err != nil {
				w.err = err
				return
			}
			copy(w.model[off:], b)
			w.acked++
		}
	})
	return w
}

// check: the blob holds what the acknowledged writes left (its SHA-256).
func (w *writer) check(t *testing.T) {
	t.Helper()
	if !blobHolds(t, w.c, w.name, w.model) {
		t.Fatalf("after %d acknowledged writes the blob is not what they wrote", w.acked)
	}
}

func (w *writer) finish(t *testing.T) {
	t.Helper()
	close(w.stop)
	w.done.Wait()
	if w.err != nil {
		t.Fatalf("a write failed: %v", w.err)
	}
}

// A large object moves with pre-copy while it takes writes: its bulk
// streams before the seal, only the chunks written since follow it, and
// every acknowledged write is in the state that arrives.
func TestPrecopyMovesAWrittenObject(t *testing.T) {
	const name, size = "actor/blob/pc", blobSize
	m, w := writtenBlob(t, name, false)
	ctx := context.Background()
	var precopied, moves int
	for range 4 {
		src := m.owner(t, name)
		st, err := src.Relocate(ctx, name, node.RelocateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st.GetOutcome() != "completed" {
			t.Fatalf("relocation %+v", st)
		}
		moves++
		if st.GetPrecopyBytes() >= size {
			precopied++
			if st.GetSealedBytes() > 8*16<<10 { // the writes' 4 chunks and the envelope's
				t.Errorf("pre-copied %d bytes, then %d after the seal: the delta is no delta", st.GetPrecopyBytes(), st.GetSealedBytes())
			}
		}
		t.Logf("move: %d bytes before the seal, %d after; interruption %dµs", st.GetPrecopyBytes(), st.GetSealedBytes(), st.GetInterruptionUs())
	}
	w.finish(t)
	if precopied < moves-1 { // the first move does not know the size yet
		t.Fatalf("%d of %d moves pre-copied", precopied, moves)
	}
	w.check(t)
	t.Logf("%d writes acknowledged during %d moves", w.acked, moves)
}

// blobHolds reports whether the blob name holds exactly want (its hash
// method's SHA-256).
func blobHolds(t *testing.T, c *client.Client, name string, want []byte) bool {
	t.Helper()
	r, err := c.Call(context.Background(), name, "hash")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		SHA256 string `json:"sha256"`
	}
	if err := json.Unmarshal(r.Payload, &got); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(want)
	return got.SHA256 == hex.EncodeToString(sum[:])
}
