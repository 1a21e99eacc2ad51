package relocation

import (
	"bytes"
	"fmt"

	"github.com/meshloc/meshloc/pkg/wire"
)

// Pre-copy (SourceConfig.PrecopyMinBytes, Prepare.precopy): the source
// streams a snapshot taken while the object still serves — the base —
// and the target assembles and checks it (PRECOPIED). Only then does the
// source seal; it sends SEALED, the final payload's manifest with the
// indexes of the chunks that differ from the base, and those chunks. The
// target builds the final payload from the base and them (Rebase) and
// checks it whole against SEALED's CRC32C, as any payload: a delta that
// left out a changed chunk fails that check and the source keeps the
// object. Both payloads are cut in chunks of one size (Manifest.Block)
// and the envelope is padded to it (EncodeEnvelopeAligned), so a state
// that changed in a few places differs in a few chunks. A type whose
// snapshot is not deterministic differs everywhere: every chunk is sent
// again, a full copy, still correct.

// PlanBlocks is the manifest of the concatenation of segs cut into chunks
// of exactly block bytes (the last one shorter), with every chunk's
// CRC32C: a pre-copy base.
func PlanBlocks(segs [][]byte, block int) Manifest {
	n := segsLen(segs)
	b := uint64(min(max(block, 1), MaxChunkBytes))
	return planCRCs(segs, Manifest{Length: n, Chunks: chunkCount(n, int(b)), Block: b})
}

// PlanDelta is the manifest of final cut as base was (base's Block), and
// the ascending indexes of its chunks that are not byte for byte the
// base's chunk at the same index. A chunk found equal takes the base's
// CRC32C without being read twice; only changed chunks are summed.
func PlanDelta(base [][]byte, bm Manifest, final [][]byte) (Manifest, []uint32) {
	n := segsLen(final)
	b := bm.chunkSize()
	if b == 0 {
		b = 1
	}
	m := Manifest{Length: n, Chunks: chunkCount(n, int(b)), Block: b}
	m.ChunkCRCs = make([]uint32, m.Chunks)
	var changed []uint32
	for i := range m.Chunks {
		start, end := m.ChunkSpan(i)
		crc, same := uint32(0), false
		if i < bm.Chunks && int(i) < len(bm.ChunkCRCs) {
			bs, be := bm.ChunkSpan(i)
			same = bs == start && be == end && rangeEqual(base, final, start, end)
			crc = bm.ChunkCRCs[i]
		}
		if !same {
			changed = append(changed, i)
			crc = 0
			eachPiece(final, start, end, func(p []byte) { crc = wire.UpdateCRC32C(crc, p) })
		}
		m.ChunkCRCs[i] = crc
		m.CRC32C = wire.CombineCRC32C(m.CRC32C, crc, int64(end-start))
	}
	return m, changed
}

// eachPiece calls f with the parts of bytes [start, end) of the
// concatenation of segs, in order, without copying.
func eachPiece(segs [][]byte, start, end uint64, f func([]byte)) {
	var off uint64
	for _, s := range segs {
		l := uint64(len(s))
		lo, hi := max(start, off), min(end, off+l)
		if lo < hi {
			f(s[lo-off : hi-off])
		}
		off += l
		if off >= end {
			return
		}
	}
}

// rangeEqual reports whether bytes [start, end) of the concatenations of
// a and b are equal (both hold them).
func rangeEqual(a, b [][]byte, start, end uint64) bool {
	var pa, pb [][]byte
	eachPiece(a, start, end, func(p []byte) { pa = append(pa, p) })
	eachPiece(b, start, end, func(p []byte) { pb = append(pb, p) })
	for len(pa) > 0 && len(pb) > 0 {
		n := min(len(pa[0]), len(pb[0]))
		if !bytes.Equal(pa[0][:n], pb[0][:n]) {
			return false
		}
		if pa[0] = pa[0][n:]; len(pa[0]) == 0 {
			pa = pa[1:]
		}
		if pb[0] = pb[0][n:]; len(pb[0]) == 0 {
			pb = pb[1:]
		}
	}
	return len(pa) == 0 && len(pb) == 0
}

// Rebase returns the assembly of the final payload m of a pre-copy whose
// base a holds (complete, its CRC32C checked): every chunk not in changed
// is the base's, at the same place, with the sum the base computed for it;
// the changed ones are still to come (Add, AddSummed). Payload then checks
// the whole against m.CRC32C as always.
//
// m must be cut as the base was (the same Block), changed ascending and
// within m, and every chunk the base cannot give (past its end, or of
// another length) listed in changed. The final buffer is the base's when
// it fits, else a new one, made as NewAssembly's is: once the base and
// the chunks received make half of it (the base counts as held chunks).
func (a *Assembly) Rebase(m Manifest, changed []uint32) (*Assembly, error) {
	if !a.Complete() || a.buf == nil {
		return nil, fmt.Errorf("%w: the base is not assembled", ErrBadManifest)
	}
	if m.Block != a.m.chunkSize() || m.Block == 0 {
		return nil, fmt.Errorf("%w: final chunks of %d bytes, the base's are %d", ErrBadManifest, m.Block, a.m.chunkSize())
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	r := &Assembly{m: m, got: make([]bool, m.Chunks), sums: make([]uint32, m.Chunks), alloc: a.alloc}
	next := 0
	for i := range m.Chunks {
		if next < len(changed) && changed[next] == i {
			next++
			continue
		}
		if i >= a.m.Chunks {
			return nil, fmt.Errorf("%w: chunk %d is past the base and not sent", ErrBadManifest, i)
		}
		bs, be := a.m.ChunkSpan(i)
		fs, fe := m.ChunkSpan(i)
		if be-bs != fe-fs {
			return nil, fmt.Errorf("%w: chunk %d changed length and is not sent", ErrBadManifest, i)
		}
		r.got[i], r.sums[i] = true, a.sums[i]
		r.have++
	}
	if next != len(changed) {
		return nil, fmt.Errorf("%w: changed chunks not ascending within %d chunks", ErrBadManifest, m.Chunks)
	}
	if m.Length <= uint64(len(a.buf)) {
		r.buf = a.buf[:m.Length]
	} else {
		r.from, r.heldBytes = a.buf, uint64(len(a.buf))
	}
	return r, nil
}
