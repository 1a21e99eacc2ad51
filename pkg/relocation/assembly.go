package relocation

import (
	"errors"
	"fmt"

	"github.com/meshloc/meshloc/pkg/wire"
)

// MaxPayloadBytes bounds one relocation's payload (the blob type holds up to 512 MiB).
const MaxPayloadBytes = 1 << 30

// MaxChunkBytes bounds one STATE chunk.
const MaxChunkBytes = 16 << 20

// MaxChunks bounds a payload's chunk count: an assembly keeps a flag and a
// sum per announced chunk, so the count must not let a PREPARE of a few
// bytes make it allocate gigabytes.
const MaxChunks = 1 << 20

// Assembly errors.
var (
	// ErrDataLost: the assembled payload's length, chunk count or CRC32C does
	// not match the manifest (docs/design.md §4 step 4).
	ErrDataLost = errors.New("relocation: data lost")
	// ErrBadManifest: a PREPARE manifest that no payload can satisfy.
	ErrBadManifest = errors.New("relocation: invalid payload manifest")
	// ErrDuplicateChunk: a chunk index already received (ignored by callers).
	ErrDuplicateChunk = errors.New("relocation: duplicate chunk")
)

// Manifest describes a payload: its length, how many chunks carry it and its CRC32C.
type Manifest struct {
	Length uint64
	Chunks uint32
	CRC32C uint32
	// ChunkCRCs is each chunk's CRC32C, on the source only (PlanSegments):
	// the chunk frames carry them. Not part of PREPARE.
	ChunkCRCs []uint32
	// Block, when not 0, is the chunk size (every chunk but the last has
	// Block bytes): pre-copy cuts the base and the final payload alike, so
	// their chunks line up. 0: the size follows from Length and Chunks.
	Block uint64
}

// PlanChunks returns the manifest of payload cut into chunks of at most
// chunkSize bytes.
func PlanChunks(payload []byte, chunkSize int) Manifest {
	return PlanSegments([][]byte{payload}, chunkSize)
}

// PlanSegments returns the manifest of the concatenation of segs cut into
// chunks of at most chunkSize bytes, with each chunk's CRC32C: one pass
// over the bytes, the payload's sum combined from the chunks'.
func PlanSegments(segs [][]byte, chunkSize int) Manifest {
	n := segsLen(segs)
	return planCRCs(segs, Manifest{Length: n, Chunks: chunkCount(n, chunkSize)})
}

func segsLen(segs [][]byte) uint64 {
	var n uint64
	for _, s := range segs {
		n += uint64(len(s))
	}
	return n
}

// planCRCs fills in m's chunk sums and payload sum from segs.
func planCRCs(segs [][]byte, m Manifest) Manifest {
	m.ChunkCRCs = make([]uint32, m.Chunks)
	seg, off := 0, uint64(0) // segs[seg] starts at payload offset off
	for i := range m.Chunks {
		start, end := m.ChunkSpan(i)
		var crc uint32
		for pos := start; pos < end; {
			for off+uint64(len(segs[seg])) <= pos {
				off += uint64(len(segs[seg]))
				seg++
			}
			hi := min(end, off+uint64(len(segs[seg])))
			crc = wire.UpdateCRC32C(crc, segs[seg][pos-off:hi-off])
			pos = hi
		}
		m.ChunkCRCs[i] = crc
		m.CRC32C = wire.CombineCRC32C(m.CRC32C, crc, int64(end-start))
	}
	return m
}

// chunkCount is the number of chunks of at most chunkSize bytes that carry n
// bytes (one, empty, for none). A chunk size outside [1, MaxChunkBytes] is
// clamped: zero would divide by zero inside Step, and larger chunks make a
// manifest that every target refuses.
func chunkCount(n uint64, chunkSize int) uint32 {
	if n == 0 {
		return 1
	}
	cs := uint64(min(max(chunkSize, 1), MaxChunkBytes))
	return uint32((n + cs - 1) / cs)
}

// Gather copies bytes [start, end) of the concatenation of segs into buf
// (grown as needed), or returns a sub-slice of one segment without copying
// when the range lies inside it. Never pass what it returned as the next
// buf: a sub-slice of a segment has the segment's capacity, and the copy
// would write into the segment.
func Gather(segs [][]byte, start, end uint64, buf []byte) []byte {
	var off uint64
	for i, s := range segs {
		l := uint64(len(s))
		if start >= off && end <= off+l {
			return s[start-off : end-off]
		}
		if start < off+l {
			buf = buf[:0]
			for _, t := range segs[i:] {
				lo := max(start, off)
				hi := min(end, off+uint64(len(t)))
				if lo < hi {
					buf = append(buf, t[lo-off:hi-off]...)
				}
				off += uint64(len(t))
				if off >= end {
					break
				}
			}
			return buf
		}
		off += l
	}
	return buf[:0]
}

// ChunkSpan is the [start, end) byte range of chunk i.
func (m Manifest) ChunkSpan(i uint32) (uint64, uint64) {
	cs := m.chunkSize()
	start := uint64(i) * cs
	return start, min(start+cs, m.Length)
}

func (m Manifest) chunkSize() uint64 {
	if m.Block > 0 {
		return m.Block
	}
	if m.Length == 0 {
		return 0
	}
	return (m.Length + uint64(m.Chunks) - 1) / uint64(m.Chunks)
}

// Validate checks that some payload can match the manifest.
func (m Manifest) Validate() error {
	switch {
	case m.Length > MaxPayloadBytes:
		return fmt.Errorf("%w: %d bytes, limit %d", ErrBadManifest, m.Length, MaxPayloadBytes)
	case m.Chunks == 0:
		return fmt.Errorf("%w: zero chunks", ErrBadManifest)
	case m.Chunks > MaxChunks:
		return fmt.Errorf("%w: %d chunks, limit %d", ErrBadManifest, m.Chunks, MaxChunks)
	case m.Length == 0 && m.Chunks != 1:
		return fmt.Errorf("%w: empty payload in %d chunks", ErrBadManifest, m.Chunks)
	case m.Length > 0 && uint64(m.Chunks) > m.Length:
		return fmt.Errorf("%w: %d chunks for %d bytes", ErrBadManifest, m.Chunks, m.Length)
	}
	if m.Block > 0 {
		if m.Block > MaxChunkBytes {
			return fmt.Errorf("%w: chunks of %d bytes, limit %d", ErrBadManifest, m.Block, MaxChunkBytes)
		}
		if want := chunkCount(m.Length, int(m.Block)); m.Chunks != want {
			return fmt.Errorf("%w: %d bytes in chunks of %d are %d chunks, not %d", ErrBadManifest, m.Length, m.Block, want, m.Chunks)
		}
		return nil
	}
	if m.Length > 0 {
		cs := m.chunkSize()
		if cs > MaxChunkBytes {
			return fmt.Errorf("%w: chunks of %d bytes, limit %d", ErrBadManifest, cs, MaxChunkBytes)
		}
		if (m.Length+cs-1)/cs != uint64(m.Chunks) {
			return fmt.Errorf("%w: %d bytes cannot be cut into exactly %d equal chunks", ErrBadManifest, m.Length, m.Chunks)
		}
	}
	return nil
}

// Assembly reassembles a payload from chunks in any order. It never returns
// a payload whose length or CRC32C differs from the manifest.
//
// Its memory grows with the bytes received, never from the manifest alone:
// a peer may announce a payload of any size up to MaxPayloadBytes and send
// little of it. Chunks are kept as they came until half the payload has
// arrived; only then is the payload's buffer made (and they are copied in),
// so an assembly holds at most twice what was sent to it.
type Assembly struct {
	m    Manifest
	buf  []byte
	got  []bool
	sums []uint32 // each received chunk's CRC32C, computed here
	have uint32
	// held: chunks received before the buffer was made, by index, and
	// their bytes.
	held      map[uint32][]byte
	heldBytes uint64
	// alloc makes the payload buffer (nil: make); see TargetConfig.Alloc.
	alloc func(n int) []byte
	// from: a pre-copy's base, the bytes the buffer starts with once made
	// (Rebase); counted in heldBytes until then.
	from []byte
	// spent: chunks added and since copied into the buffer, not yet
	// reported (Spent).
	spent [][]byte
}

// NewAssembly validates the manifest and returns an empty assembly. The
// buffer is made once half the payload arrived.
func NewAssembly(m Manifest) (*Assembly, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &Assembly{m: m, got: make([]bool, m.Chunks), sums: make([]uint32, m.Chunks)}, nil
}

// Add stores chunk i. A wrong index or size is ErrDataLost (the stage
// cannot complete); a repeated index is ErrDuplicateChunk and changes nothing.
// A chunk is kept without a copy until the buffer is made (and the only
// chunk of a one-chunk payload for good): the caller must not change data
// after it was added until Spent returns it. The chunk's CRC32C is computed
// here, once: Payload combines the chunks' sums.
func (a *Assembly) Add(i uint32, data []byte) error { return a.add(i, data, false, 0) }

// AddSummed is Add of a chunk whose CRC32C the source sent (StateChunk's
// crc32c): a chunk whose bytes do not match it is ErrDataLost at once,
// rather than a payload that fails its CRC32C once every chunk arrived.
func (a *Assembly) AddSummed(i uint32, data []byte, sum uint32) error {
	return a.add(i, data, true, sum)
}

func (a *Assembly) add(i uint32, data []byte, summed bool, sum uint32) error {
	if i >= a.m.Chunks {
		return fmt.Errorf("%w: chunk %d of %d", ErrDataLost, i, a.m.Chunks)
	}
	if a.got[i] {
		return fmt.Errorf("%w: %d", ErrDuplicateChunk, i)
	}
	start, end := a.m.ChunkSpan(i)
	if uint64(len(data)) != end-start {
		return fmt.Errorf("%w: chunk %d has %d bytes, want %d", ErrDataLost, i, len(data), end-start)
	}
	crc := wire.CRC32C(data)
	if summed && crc != sum {
		return fmt.Errorf("%w: chunk %d has CRC32C %08x, its frame says %08x", ErrDataLost, i, crc, sum)
	}
	a.sums[i] = crc
	switch {
	case a.m.Chunks == 1:
		a.buf = data
	case a.buf == nil && 2*(a.heldBytes+uint64(len(data))) < a.m.Length:
		if a.held == nil {
			a.held = map[uint32][]byte{}
		}
		a.held[i] = data
		a.heldBytes += uint64(len(data))
	case a.buf == nil:
		if a.alloc != nil {
			a.buf = a.alloc(int(a.m.Length))
		} else {
			a.buf = make([]byte, a.m.Length)
		}
		copy(a.buf, a.from)
		a.from = nil
		for j, d := range a.held {
			s, _ := a.m.ChunkSpan(j)
			copy(a.buf[s:], d)
			a.spent = append(a.spent, d)
		}
		a.held, a.heldBytes = nil, 0
		fallthrough
	default:
		copy(a.buf[start:end], data)
		a.spent = append(a.spent, data)
	}
	a.got[i] = true
	a.have++
	return nil
}

// Spent returns the chunks added since the last call whose bytes the
// assembly copied into its buffer and no longer keeps: their caller may
// reuse them. A chunk kept as it came (before the buffer is made, or the
// only chunk of a payload, which becomes the payload) is not among them
// until it is copied.
func (a *Assembly) Spent() [][]byte {
	s := a.spent
	a.spent = nil
	return s
}

// Complete reports whether every chunk arrived.
func (a *Assembly) Complete() bool { return a.have == a.m.Chunks }

// Received is the number of chunks stored.
func (a *Assembly) Received() uint32 { return a.have }

// Payload returns the assembled bytes once complete and only if their
// CRC32C, combined from the chunks' sums computed by Add, matches the
// manifest.
func (a *Assembly) Payload() ([]byte, error) {
	if !a.Complete() {
		return nil, fmt.Errorf("%w: %d of %d chunks", ErrDataLost, a.have, a.m.Chunks)
	}
	if a.buf == nil {
		a.buf = []byte{}
	}
	var got uint32
	for i, sum := range a.sums {
		start, end := a.m.ChunkSpan(uint32(i))
		got = wire.CombineCRC32C(got, sum, int64(end-start))
	}
	if got != a.m.CRC32C {
		return nil, fmt.Errorf("%w: CRC32C %08x, manifest says %08x", ErrDataLost, got, a.m.CRC32C)
	}
	return a.buf, nil
}
