package relocation

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// rebaseAll assembles final on the target's side from a base assembled
// from base and the chunks PlanDelta lists; it returns the payload.
func rebaseAll(t *testing.T, base, final [][]byte, block int) ([]byte, []uint32) {
	t.Helper()
	bm := PlanBlocks(base, block)
	a, err := NewAssembly(Manifest{Length: bm.Length, Chunks: bm.Chunks, CRC32C: bm.CRC32C, Block: bm.Block})
	if err != nil {
		t.Fatal(err)
	}
	for i := range bm.Chunks {
		s, e := bm.ChunkSpan(i)
		if err := a.AddSummed(i, Gather(base, s, e, nil), bm.ChunkCRCs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Payload(); err != nil {
		t.Fatal(err)
	}
	fm, changed := PlanDelta(base, bm, final)
	if want := PlanBlocks(final, block); want.CRC32C != fm.CRC32C || want.Chunks != fm.Chunks {
		t.Fatalf("PlanDelta's manifest %+v, PlanBlocks says %+v", fm, want)
	}
	r, err := a.Rebase(Manifest{Length: fm.Length, Chunks: fm.Chunks, CRC32C: fm.CRC32C, Block: fm.Block}, changed)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range changed {
		s, e := fm.ChunkSpan(i)
		if err := r.AddSummed(i, Gather(final, s, e, nil), fm.ChunkCRCs[i]); err != nil {
			t.Fatal(err)
		}
	}
	p, err := r.Payload()
	if err != nil {
		t.Fatal(err)
	}
	return p, changed
}

func TestPlanDeltaSendsOnlyChangedChunks(t *testing.T) {
	base := simPayload(1000)
	final := bytes.Clone(base)
	final[150] ^= 1 // chunk 1
	final[999] ^= 1 // chunk 9
	for _, segs := range [][][]byte{{final}, {final[:333], final[333:777], final[777:]}} {
		p, changed := rebaseAll(t, [][]byte{base[:10], base[10:]}, segs, 100)
		if !bytes.Equal(p, final) {
			t.Fatal("the rebased payload is not the final one")
		}
		if len(changed) != 2 || changed[0] != 1 || changed[1] != 9 {
			t.Fatalf("changed %v, want [1 9]", changed)
		}
	}
	// Longer and shorter finals: the chunks past the base, and the last
	// one of another length, are sent.
	longer := append(bytes.Clone(base), simPayload(250)...)
	if p, changed := rebaseAll(t, [][]byte{base}, [][]byte{longer}, 100); !bytes.Equal(p, longer) || len(changed) != 3 {
		t.Fatalf("longer: changed %v", changed)
	}
	shorter := base[:950]
	if p, changed := rebaseAll(t, [][]byte{base}, [][]byte{shorter}, 100); !bytes.Equal(p, shorter) || len(changed) != 1 || changed[0] != 9 {
		t.Fatalf("shorter: changed %v", changed)
	}
}

func TestPlanDeltaRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		block := 1 + r.IntN(64)
		base := simPayload(r.IntN(2000))
		final := simPayload(max(0, len(base)+r.IntN(200)-100))
		for range r.IntN(5) {
			if len(final) > 0 {
				final[r.IntN(len(final))] ^= byte(1 + r.IntN(255))
			}
		}
		if p, _ := rebaseAll(t, [][]byte{base}, [][]byte{final}, block); !bytes.Equal(p, final) {
			t.Fatalf("block %d, base %d, final %d: wrong payload", block, len(base), len(final))
		}
	}
}

func TestRebaseRefusesWhatTheBaseCannotGive(t *testing.T) {
	base := simPayload(1000)
	bm := PlanBlocks([][]byte{base}, 100)
	a, _ := NewAssembly(Manifest{Length: bm.Length, Chunks: bm.Chunks, CRC32C: bm.CRC32C, Block: bm.Block})
	for i := range bm.Chunks {
		s, e := bm.ChunkSpan(i)
		_ = a.Add(i, base[s:e])
	}
	for _, c := range []struct {
		name    string
		m       Manifest
		changed []uint32
	}{
		{"another chunk size", Manifest{Length: 1000, Chunks: 20, Block: 50}, nil},
		{"past the base, not sent", Manifest{Length: 1100, Chunks: 11, Block: 100}, nil},
		{"last chunk of another length, not sent", Manifest{Length: 990, Chunks: 10, Block: 100}, nil},
		{"changed not ascending", Manifest{Length: 1000, Chunks: 10, Block: 100}, []uint32{5, 2}},
		{"changed repeated", Manifest{Length: 1000, Chunks: 10, Block: 100}, []uint32{2, 2}},
		{"changed past the end", Manifest{Length: 1000, Chunks: 10, Block: 100}, []uint32{10}},

		{"wrong chunk count", Manifest{Length: 1000, Chunks: 9, Block: 100}, nil},
	} {
		if _, err := a.Rebase(c.m, c.changed); !errors.Is(err, ErrBadManifest) {
			t.Errorf("%s: %v, want ErrBadManifest", c.name, err)
		}
	}
	// A delta that leaves out a changed chunk: the payload fails its CRC32C.
	final := bytes.Clone(base)
	final[420] ^= 1
	fm, _ := PlanDelta([][]byte{base}, bm, [][]byte{final})
	r, err := a.Rebase(fm, []uint32{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Payload(); !errors.Is(err, ErrDataLost) {
		t.Fatalf("a delta without its changed chunk: %v, want ErrDataLost", err)
	}
}

func TestEncodeEnvelopeAlignedStatesStartOnABoundary(t *testing.T) {
	var id wire.RelocationID
	for _, align := range []int{1, 2, 7, 64, 128, 1000, 64 << 10} {
		for n := range 300 {
			ps := &pb.ParticipantState{Participant: &pb.Participant{Object: "actor/blob/" + string(bytes.Repeat([]byte("x"), n))}, StateLength: 3}
			segs, err := EncodeEnvelopeAligned(id, []*pb.ParticipantState{ps}, [][]byte{[]byte("abc")}, align, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(segs[0])%align != 0 {
				t.Fatalf("align %d, name of %d: the states start at %d", align, n, len(segs[0]))
			}
			start := (n % 4) * align // where a base's states began
			if at := statesAt(segs); at != len(segs[0]) {
				t.Fatalf("statesAt %d, the header is %d bytes", at, len(segs[0]))
			}
			end := payloadHeaderLen + proto.Size(&pb.Envelope{Version: wire.Version, RelocationId: id[:], Participants: []*pb.ParticipantState{ps}})
			if roomy, err := EncodeEnvelopeAligned(id, []*pb.ParticipantState{ps}, [][]byte{[]byte("abc")}, align, 0, 100); err != nil ||
				len(roomy[0])%align != 0 || len(roomy[0]) < end+100 {
				t.Fatalf("align %d, room 100: the states start at %d, the envelope ends at %d (%v)", align, len(roomy[0]), end, err)
			}
			if later, err := EncodeEnvelopeAligned(id, []*pb.ParticipantState{ps}, [][]byte{[]byte("abc")}, align, start, 0); err != nil ||
				len(later[0])%align != 0 || len(later[0]) < start || len(later[0]) > max(start, len(segs[0])) {
				t.Fatalf("align %d, from %d: the states start at %d (%v)", align, start, len(later[0]), err)
			}
			env, states, err := DecodePayload(bytes.Join(segs, nil))
			if err != nil || string(states[0]) != "abc" || len(env.GetParticipants()) != 1 {
				t.Fatalf("align %d, name of %d: %v", align, n, err)
			}
		}
	}
}

// FuzzRebase: a base assembled whole, then a final manifest and a changed
// list from the peer (honest: PlanDelta's, or anything): no panic, and a
// payload comes back only if it is exactly the final one.
func FuzzRebase(f *testing.F) {
	f.Add([]byte("the base of a pre-copy"), []byte("the final of a pre-copy!"), uint8(4), []byte{1, 3}, true)
	f.Add([]byte("abcdefgh"), []byte("abcdefgh"), uint8(3), []byte{}, false)
	f.Fuzz(func(t *testing.T, base, final []byte, block uint8, list []byte, honest bool) {
		b := int(block%32) + 1
		bm := PlanBlocks([][]byte{base}, b)
		a, err := NewAssembly(Manifest{Length: bm.Length, Chunks: bm.Chunks, CRC32C: bm.CRC32C, Block: bm.Block})
		if err != nil {
			t.Fatal(err)
		}
		for i := range bm.Chunks {
			s, e := bm.ChunkSpan(i)
			if err := a.Add(i, bytes.Clone(base[s:e])); err != nil {
				t.Fatal(err)
			}
		}
		fm, changed := PlanDelta([][]byte{base}, bm, [][]byte{final})
		if !honest {
			changed = nil
			for _, c := range list {
				changed = append(changed, uint32(c))
			}
		}
		r, err := a.Rebase(Manifest{Length: fm.Length, Chunks: fm.Chunks, CRC32C: fm.CRC32C, Block: fm.Block}, changed)
		if err != nil {
			if honest {
				t.Fatalf("an honest delta refused: %v", err)
			}
			return
		}
		for _, i := range changed {
			s, e := fm.ChunkSpan(i)
			_ = r.Add(i, bytes.Clone(final[s:e]))
		}
		p, err := r.Payload()
		switch {
		case err == nil && !bytes.Equal(p, final):
			t.Fatalf("a payload that is not the final one")
		case err != nil && honest:
			t.Fatalf("an honest delta: %v", err)
		}
	})
}

// The padding always fills the gap to the first boundary that leaves room
// for its own field: never a block more than needed.
func TestPaddingIsExact(t *testing.T) {
	for _, align := range []int{1, 3, 64, 4096, 64 << 10} {
		for size := range 70000 {
			if size > 300 && size%97 != 0 {
				continue
			}
			for _, minStart := range []int{0, 2 * align} {
				var n int
				for _, p := range padding(size, align, minStart) {
					n += 1 + protowireSize(uint64(len(p))) + len(p)
				}
				used := payloadHeaderLen + size
				want := (max(used+2, minStart) + align - 1) / align * align
				if used+n != want {
					t.Fatalf("size %d, align %d, from %d: header of %d bytes, want %d", size, align, minStart, used+n, want)
				}
			}
		}
	}
}
