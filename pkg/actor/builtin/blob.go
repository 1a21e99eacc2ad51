package builtin

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"strconv"

	"github.com/meshloc/meshloc/pkg/actor"
)

// MaxBlobBytes bounds a blob: 512 MiB.
const MaxBlobBytes = 512 << 20

// blob is a byte string of any size up to MaxBlobBytes, for streaming tests:
// its snapshot is the raw bytes, so a 256 MiB blob is a 256 MiB snapshot.
//
//	fill BYTES [SEED]   → {"size":n,"sha256":hex}
//	hash                → {"size":n,"sha256":hex}
//	size                → {"size":n}   (constant time: the cheap call of benchmarks)
//	write OFFSET BYTES  → {"size":n}   (BYTES, as given, replace those at OFFSET)
//
// fill replaces the content with BYTES bytes (decimal, 0 to MaxBlobBytes)
// of a ChaCha8 stream keyed by SHA-256 of the size and SEED (default empty),
// its 64-bit outputs written little-endian: the same arguments give the same
// bytes on every node and Go version (math/rand/v2's ChaCha8 is the
// specified chacha8rand), and the data does not compress.
type blob struct {
	data []byte
	sum  [sha256.Size]byte
	// summed says sum is up to date (Restore leaves it to the next hash).
	summed bool
	// shared: data was handed out by Snapshot (or came from Restore) and
	// must not change in place; the next write copies it first.
	shared bool
}

type blobReply struct {
	Size   int    `json:"size"`
	SHA256 string `json:"sha256"`
}

// BlobContent returns the content fill writes for size and seed.
func BlobContent(size int, seed string) []byte {
	h := sha256.New()
	h.Write([]byte("meshloc blob v1\x00"))
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(size)))
	h.Write([]byte(seed))
	var key [32]byte
	h.Sum(key[:0])
	r := rand.NewChaCha8(key)
	b := make([]byte, size)
	i := 0
	for ; i+8 <= size; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	if i < size {
		var last [8]byte
		binary.LittleEndian.PutUint64(last[:], r.Uint64())
		copy(b[i:], last[:])
	}
	return b
}

// Handle implements actor.Object.
func (b *blob) Handle(_ actor.Context, method string, args [][]byte) ([]byte, error) {
	switch method {
	case "fill":
		if len(args) != 1 && len(args) != 2 {
			return nil, actor.InvalidArgument("blob fill takes BYTES [SEED], got %d argument(s)", len(args))
		}
		n, err := strconv.ParseInt(string(args[0]), 10, 64)
		if err != nil || n < 0 || n > MaxBlobBytes {
			return nil, actor.InvalidArgument("BYTES %q is not a decimal size from 0 to %d", args[0], MaxBlobBytes)
		}
		seed := ""
		if len(args) == 2 {
			seed = string(args[1])
		}
		// A new slice, never an overwrite: a snapshot taken before may still
		// be streaming the old one.
		b.data, b.shared = BlobContent(int(n), seed), false
		b.sum, b.summed = sha256.Sum256(b.data), true
		return b.reply()
	case "hash":
		if err := wantArgs(BlobType, method, args); err != nil {
			return nil, err
		}
		return b.reply()
	case "write":
		if len(args) != 2 {
			return nil, actor.InvalidArgument("blob write takes OFFSET BYTES, got %d argument(s)", len(args))
		}
		off, err := strconv.ParseInt(string(args[0]), 10, 64)
		if err != nil || off < 0 || off+int64(len(args[1])) > int64(len(b.data)) {
			return nil, actor.InvalidArgument("OFFSET %q with %d bytes does not lie within the blob's %d", args[0], len(args[1]), len(b.data))
		}
		if b.shared {
			// Copy on write: a snapshot (a relocation's pre-copy base) may
			// still be streaming the old bytes.
			b.data, b.shared = append([]byte(nil), b.data...), false
		}
		copy(b.data[off:], args[1])
		b.summed = false
		return reply(struct {
			Size int `json:"size"`
		}{len(b.data)})
	case "size":
		if err := wantArgs(BlobType, method, args); err != nil {
			return nil, err
		}
		return reply(struct {
			Size int `json:"size"`
		}{len(b.data)})
	}
	return nil, actor.UnknownMethod(BlobType, method)
}

func (b *blob) reply() ([]byte, error) {
	if !b.summed {
		b.sum, b.summed = sha256.Sum256(b.data), true
	}
	return reply(blobReply{Size: len(b.data), SHA256: hex.EncodeToString(b.sum[:])})
}

// Snapshot implements actor.Object: the raw bytes, not copied.
func (b *blob) Snapshot() ([]byte, error) {
	if b.data == nil {
		return []byte{}, nil
	}
	b.shared = true
	return b.data, nil
}

// Restore implements actor.Object: any bytes up to MaxBlobBytes, kept
// without a copy.
func (b *blob) Restore(state []byte) error {
	if len(state) > MaxBlobBytes {
		return corrupt(BlobType, "%d bytes, limit %d", len(state), MaxBlobBytes)
	}
	b.data, b.summed, b.shared = state, false, false // the caller gave it away (actor.Object.Restore)
	return nil
}
