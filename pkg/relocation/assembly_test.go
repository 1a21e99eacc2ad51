package relocation

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/meshloc/meshloc/pkg/wire"
)

// docs/design.md §4 step 4: T assembles and checks length, count and CRC32C; a
// mismatch is DataLost. assembly.go: "It never returns a payload whose
// length or CRC32C differs from the manifest."

func TestManifestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    Manifest
		ok   bool
	}{
		{"empty payload in one chunk", Manifest{Length: 0, Chunks: 1}, true},
		{"one byte", Manifest{Length: 1, Chunks: 1}, true},
		{"10 bytes in 3 chunks of 4", Manifest{Length: 10, Chunks: 3}, true},
		{"10 bytes in 4 chunks of 3", Manifest{Length: 10, Chunks: 4}, true},
		{"one byte per chunk", Manifest{Length: 10, Chunks: 10}, true},
		{"largest chunk", Manifest{Length: MaxChunkBytes, Chunks: 1}, true},
		{"largest payload", Manifest{Length: MaxPayloadBytes, Chunks: MaxPayloadBytes / MaxChunkBytes}, true},
		{"zero chunks", Manifest{Length: 10, Chunks: 0}, false},
		{"zero chunks, empty", Manifest{Length: 0, Chunks: 0}, false},
		{"empty payload in 2 chunks", Manifest{Length: 0, Chunks: 2}, false},
		{"more chunks than bytes", Manifest{Length: 3, Chunks: 4}, false},
		{"payload over the limit", Manifest{Length: MaxPayloadBytes + 1, Chunks: 1 << 10}, false},
		{"chunk over the limit", Manifest{Length: MaxChunkBytes + 1, Chunks: 1}, false},
		{"10 bytes cannot be 6 equal chunks", Manifest{Length: 10, Chunks: 6}, false},
		{"9 bytes cannot be 4 equal chunks", Manifest{Length: 9, Chunks: 4}, false},
		{"huge count", Manifest{Length: 100, Chunks: 1<<32 - 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.m.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate(%+v) = %v, want ok=%v", tc.m, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrBadManifest) {
				t.Fatalf("error %v is not ErrBadManifest", err)
			}
			if _, err2 := NewAssembly(tc.m); (err2 == nil) != tc.ok {
				t.Fatalf("NewAssembly(%+v) = %v, want ok=%v", tc.m, err2, tc.ok)
			}
		})
	}
}

// PlanChunks always makes a manifest the target accepts, whose spans tile
// the payload, each at most chunkSize bytes.
func TestPlanChunksTilesThePayload(t *testing.T) {
	for n := 0; n <= 200; n++ {
		for cs := -1; cs <= 210; cs++ {
			m := PlanChunks(make([]byte, n), cs)
			if err := m.Validate(); err != nil {
				t.Fatalf("PlanChunks(%d bytes, %d): %+v: %v", n, cs, m, err)
			}
			var next uint64
			for i := range m.Chunks {
				start, end := m.ChunkSpan(i)
				if start != next || end < start || (n > 0 && end == start) || end-start > uint64(max(cs, 1)) {
					t.Fatalf("PlanChunks(%d bytes, %d): chunk %d spans [%d,%d) after %d", n, cs, i, start, end, next)
				}
				next = end
			}
			if next != uint64(n) {
				t.Fatalf("PlanChunks(%d bytes, %d): spans end at %d", n, cs, next)
			}
		}
	}
}

// PlanSegments plans the concatenation exactly as PlanChunks plans the
// whole, and Gather returns exactly its bytes, whatever the segmentation
// (empty segments included) and the range.
func TestPlanSegmentsAndGather(t *testing.T) {
	payload := simPayload(23)
	for cuts := range 1 << 6 {
		// Segments cut at the set bits of cuts (positions 0, 4, 8, … 20),
		// with an empty segment where two cuts meet the same point.
		var segs [][]byte
		last := 0
		for k := range 6 {
			if cuts&(1<<k) != 0 {
				at := 4 * k
				segs = append(segs, payload[last:at])
				last = at
			}
		}
		segs = append(segs, payload[last:])
		for _, cs := range []int{0, 1, 3, 4, 7, 23, 100} {
			m := PlanSegments(segs, cs)
			if want := chunkCount(uint64(len(payload)), cs); m.Length != uint64(len(payload)) || m.Chunks != want || m.CRC32C != wire.CRC32C(payload) || len(m.ChunkCRCs) != int(want) {
				t.Fatalf("cuts %b, chunk %d: PlanSegments %+v, want %d bytes in %d chunks, CRC32C %08x", cuts, cs, m, len(payload), want, wire.CRC32C(payload))
			}
			var buf []byte
			for i := range m.Chunks {
				start, end := m.ChunkSpan(i)
				if m.ChunkCRCs[i] != wire.CRC32C(payload[start:end]) {
					t.Fatalf("cuts %b, chunk %d: chunk %d CRC32C %08x, want %08x", cuts, cs, i, m.ChunkCRCs[i], wire.CRC32C(payload[start:end]))
				}
				if got := Gather(segs, start, end, buf); !bytes.Equal(got, payload[start:end]) {
					t.Fatalf("cuts %b: Gather [%d,%d) = %q, want %q", cuts, start, end, got, payload[start:end])
				}
			}
		}
		for start := 0; start <= len(payload); start++ {
			for end := start; end <= len(payload); end++ {
				if got := Gather(segs, uint64(start), uint64(end), nil); !bytes.Equal(got, payload[start:end]) {
					t.Fatalf("cuts %b: Gather [%d,%d) = %q", cuts, start, end, got)
				}
			}
		}
	}
}

func chunksOf(payload []byte, m Manifest) [][]byte {
	out := make([][]byte, m.Chunks)
	for i := range m.Chunks {
		start, end := m.ChunkSpan(i)
		out[i] = payload[start:end]
	}
	return out
}

func TestAssemblyAnyOrder(t *testing.T) {
	payload := simPayload(10)
	m := PlanChunks(payload, 3) // 4 chunks: 3, 3, 3, 1
	parts := chunksOf(payload, m)
	perm := []uint32{0, 1, 2, 3}
	var permute func(k int)
	count := 0
	permute = func(k int) {
		if k == len(perm) {
			count++
			a, err := NewAssembly(m)
			if err != nil {
				t.Fatal(err)
			}
			for j, i := range perm {
				if a.Complete() {
					t.Fatalf("order %v: complete after %d chunks", perm, j)
				}
				if _, err := a.Payload(); !errors.Is(err, ErrDataLost) {
					t.Fatalf("order %v: payload before complete: %v", perm, err)
				}
				if err := a.Add(i, parts[i]); err != nil {
					t.Fatalf("order %v: Add(%d): %v", perm, i, err)
				}
			}
			got, err := a.Payload()
			if err != nil || !bytes.Equal(got, payload) {
				t.Fatalf("order %v: payload %q, %v", perm, got, err)
			}
			return
		}
		for i := k; i < len(perm); i++ {
			perm[k], perm[i] = perm[i], perm[k]
			permute(k + 1)
			perm[k], perm[i] = perm[i], perm[k]
		}
	}
	permute(0)
	if count != 24 {
		t.Fatalf("%d orders", count)
	}
}

func TestAssemblyEmptyPayload(t *testing.T) {
	m := PlanChunks(nil, 4)
	a, err := NewAssembly(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Add(0, nil); err != nil {
		t.Fatal(err)
	}
	got, err := a.Payload()
	if err != nil || len(got) != 0 {
		t.Fatalf("payload %q, %v", got, err)
	}
}

func TestAssemblyDuplicateIgnored(t *testing.T) {
	payload := simPayload(10)
	m := PlanChunks(payload, 4)
	parts := chunksOf(payload, m)
	a, _ := NewAssembly(m)
	if err := a.Add(1, parts[1]); err != nil {
		t.Fatal(err)
	}
	// The same index again, even with other bytes, changes nothing.
	for _, data := range [][]byte{parts[1], []byte("XXXX")} {
		if err := a.Add(1, data); !errors.Is(err, ErrDuplicateChunk) {
			t.Fatalf("duplicate: %v", err)
		}
		if a.Received() != 1 {
			t.Fatalf("received %d", a.Received())
		}
	}
	_ = a.Add(0, parts[0])
	_ = a.Add(2, parts[2])
	got, err := a.Payload()
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("payload %q, %v", got, err)
	}
}

func TestAssemblyWrongIndexOrSize(t *testing.T) {
	payload := simPayload(10)
	m := PlanChunks(payload, 4) // 4, 4, 2
	for _, tc := range []struct {
		name string
		i    uint32
		data []byte
	}{
		{"index past the end", 3, []byte("ab")},
		{"index far past the end", 1 << 31, []byte("ab")},
		{"short chunk", 0, []byte("abc")},
		{"long chunk", 0, []byte("abcde")},
		{"last chunk too long", 2, []byte("abcd")},
		{"last chunk empty", 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := NewAssembly(m)
			if err := a.Add(tc.i, tc.data); !errors.Is(err, ErrDataLost) {
				t.Fatalf("Add(%d, %d bytes) = %v, want ErrDataLost", tc.i, len(tc.data), err)
			}
			if a.Received() != 0 {
				t.Fatalf("a refused chunk was stored")
			}
			// The right chunk is still accepted afterwards.
			if tc.i < m.Chunks {
				start, end := m.ChunkSpan(tc.i)
				if err := a.Add(tc.i, payload[start:end]); err != nil {
					t.Fatalf("the right chunk after a refused one: %v", err)
				}
			}
		})
	}
}

func TestAssemblyCRCMismatchNeverYieldsPayload(t *testing.T) {
	payload := simPayload(10)
	m := PlanChunks(payload, 4)
	t.Run("corrupt chunk", func(t *testing.T) {
		a, _ := NewAssembly(m)
		parts := chunksOf(payload, m)
		bad := append([]byte(nil), parts[1]...)
		bad[0] ^= 0x01
		for i, p := range parts {
			if i == 1 {
				p = bad
			}
			if err := a.Add(uint32(i), p); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := a.Payload(); !errors.Is(err, ErrDataLost) || got != nil {
			t.Fatalf("payload %q, %v", got, err)
		}
	})
	t.Run("chunk that does not match its frame's sum", func(t *testing.T) {
		a, _ := NewAssembly(m)
		parts := chunksOf(payload, m)
		bad := append([]byte(nil), parts[1]...)
		bad[0] ^= 0x01
		if err := a.AddSummed(1, bad, m.ChunkCRCs[1]); !errors.Is(err, ErrDataLost) {
			t.Fatalf("a damaged chunk was stored: %v", err)
		}
		for i, p := range parts { // the good chunk 1 is still welcome
			if err := a.AddSummed(uint32(i), p, m.ChunkCRCs[i]); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := a.Payload(); err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("payload %q, %v", got, err)
		}
	})
	t.Run("manifest with another CRC", func(t *testing.T) {
		m2 := m
		m2.CRC32C ^= 0x80000000
		a, _ := NewAssembly(m2)
		for i, p := range chunksOf(payload, m2) {
			_ = a.Add(uint32(i), p)
		}
		if got, err := a.Payload(); !errors.Is(err, ErrDataLost) || got != nil {
			t.Fatalf("payload %q, %v", got, err)
		}
	})
}

// FuzzAssembly: a random manifest and a random sequence of chunks (right,
// corrupted, truncated or extended, any index): no panic, and never a
// payload whose length or CRC32C differs from the manifest. With a real
// manifest (real=true), a complete assembly of unaltered chunks gives back
// exactly the payload, and one with a flipped byte gives none (CRC32C
// detects every single-byte error).
func FuzzAssembly(f *testing.F) {
	f.Add([]byte("hello, relocation"), uint32(0), uint16(5), uint32(0), []byte{0, 0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 4, 0, 0}, true)
	f.Add([]byte("abc"), uint32(10), uint16(3), uint32(7), []byte{2, 0, 1, 1, 0, 0}, false)
	f.Fuzz(func(t *testing.T, payload []byte, length uint32, chunks uint16, crc uint32, script []byte, real bool) {
		m := Manifest{Length: uint64(length % (1 << 16)), Chunks: uint32(chunks), CRC32C: crc}
		if real {
			m = Manifest{Length: uint64(len(payload)), Chunks: uint32(chunks), CRC32C: wire.CRC32C(payload)}
		}
		a, err := NewAssembly(m)
		if err != nil {
			if m.Validate() == nil || !errors.Is(err, ErrBadManifest) {
				t.Fatalf("NewAssembly(%+v): %v", m, err)
			}
			return
		}
		source := func(start, end uint64) []byte {
			if real {
				return append([]byte(nil), payload[start:end]...)
			}
			b := make([]byte, end-start)
			for k := range b {
				if len(payload) > 0 {
					b[k] = payload[(start+uint64(k))%uint64(len(payload))]
				}
			}
			return b
		}
		flipped := false
		have := make(map[uint32]bool)
		for len(script) >= 3 {
			i := uint32(binary.LittleEndian.Uint16(script)) % (m.Chunks + 1)
			mode := script[2] % 4
			script = script[3:]
			var data []byte
			if i < m.Chunks {
				data = source(m.ChunkSpan(i))
			}
			switch {
			case mode == 1 && len(data) > 0:
				data[len(data)/2] ^= 0x5a
			case mode == 2 && len(data) > 0:
				data = data[:len(data)-1]
			case mode == 3:
				data = append(data, 'x')
			default:
				mode = 0
			}
			before := a.Received()
			err := a.Add(i, data)
			switch {
			case i < m.Chunks && have[i]:
				if !errors.Is(err, ErrDuplicateChunk) {
					t.Fatalf("Add(%d) again = %v, want ErrDuplicateChunk", i, err)
				}
			case i >= m.Chunks || mode >= 2:
				if !errors.Is(err, ErrDataLost) {
					t.Fatalf("Add(%d, mode %d) = %v, want ErrDataLost", i, mode, err)
				}
			case err != nil && !errors.Is(err, ErrDuplicateChunk):
				t.Fatalf("Add(%d, mode %d) = %v", i, mode, err)
			case err == nil && mode == 1:
				flipped = true
			}
			if err == nil {
				have[i] = true
			}
			if err != nil && a.Received() != before {
				t.Fatalf("a refused chunk changed the assembly")
			}
		}
		if a.Received() > m.Chunks || a.Complete() != (a.Received() == m.Chunks) {
			t.Fatalf("received %d of %d, complete %v", a.Received(), m.Chunks, a.Complete())
		}
		got, err := a.Payload()
		if err != nil {
			if !errors.Is(err, ErrDataLost) {
				t.Fatalf("Payload: %v", err)
			}
			if real && a.Complete() && !flipped {
				t.Fatalf("unaltered chunks refused: %v", err)
			}
			return
		}
		if !a.Complete() || uint64(len(got)) != m.Length || wire.CRC32C(got) != m.CRC32C {
			t.Fatalf("payload of %d bytes, CRC %08x, for manifest %+v", len(got), wire.CRC32C(got), m)
		}
		if real && (flipped || !bytes.Equal(got, payload)) {
			t.Fatalf("payload %q from altered chunks (flipped=%v), want %q", got, flipped, payload)
		}
	})
}

// A one-chunk payload is the chunk itself, not a copy; it is still checked.
func TestAssemblyOneChunkIsNotCopied(t *testing.T) {
	data := []byte("one chunk of state")
	m := PlanChunks(data, 1<<20)
	a, err := NewAssembly(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Add(0, data); err != nil {
		t.Fatal(err)
	}
	p, err := a.Payload()
	if err != nil || &p[0] != &data[0] {
		t.Fatalf("payload %q (%v) is not the chunk", p, err)
	}
	if s := a.Spent(); len(s) != 0 {
		t.Fatalf("the payload's only chunk is given back as spent: %d", len(s))
	}
	bad, _ := NewAssembly(m)
	_ = bad.Add(0, []byte("one chunk of stat!"))
	if _, err := bad.Payload(); !errors.Is(err, ErrDataLost) {
		t.Fatalf("a damaged one-chunk payload: %v", err)
	}
}

// An announced payload is not allocated from the manifest alone: chunks
// are held as they come until half the payload arrived, then the buffer is
// made once (a peer that announces much and sends little holds only what
// it sent), and the payload is still exact, in any order.
func TestAssemblyBufferGrowsWithChunks(t *testing.T) {
	const chunk, n = 1024, 64
	payload := make([]byte, chunk*n)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	m := PlanChunks(payload, chunk)
	a, err := NewAssembly(Manifest{Length: m.Length, Chunks: m.Chunks, CRC32C: m.CRC32C})
	if err != nil {
		t.Fatal(err)
	}
	allocs := 0
	a.alloc = func(n int) []byte { allocs++; return make([]byte, n) }
	order := make([]uint32, 0, n)
	for i := n - 1; i >= 0; i -= 2 { // odd indices from the end, then even ones
		order = append(order, uint32(i))
	}
	for i := 0; i < n; i += 2 {
		order = append(order, uint32(i))
	}
	// Each chunk is a buffer of its own, as the receiver's; it is spent
	// (given back for reuse) exactly when the assembly copied it.
	mine := map[*byte]bool{}
	spent := 0
	for k, i := range order {
		start, end := m.ChunkSpan(i)
		c := append([]byte(nil), payload[start:end]...)
		mine[&c[0]] = true
		if err := a.Add(i, c); err != nil {
			t.Fatal(err)
		}
		wantAlloc := 0
		if 2*(k+1) >= n {
			wantAlloc = 1
		}
		if allocs != wantAlloc {
			t.Fatalf("after %d of %d chunks: %d buffers made, want %d", k+1, n, allocs, wantAlloc)
		}
		for _, d := range a.Spent() {
			if !mine[&d[0]] {
				t.Fatalf("after %d chunks: spent a chunk twice, or one not added", k+1)
			}
			delete(mine, &d[0])
			clear(d) // reused at once: the payload must not change
			spent++
		}
		if want := (k + 1) * wantAlloc; spent != want {
			t.Fatalf("after %d of %d chunks: %d spent, want %d", k+1, n, spent, want)
		}
	}
	if err := a.Add(order[0], payload[:chunk]); !errors.Is(err, ErrDuplicateChunk) || len(a.Spent()) != 0 {
		t.Fatalf("a duplicate: %v, spent %d", err, len(a.Spent()))
	}
	got, err := a.Payload()
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("payload differs (%v)", err)
	}
}
