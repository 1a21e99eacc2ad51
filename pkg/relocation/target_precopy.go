package relocation

import (
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The target's pre-copy (precopy.go): in TargetAssembling, the base's
// chunks, PRECOPIED once it is whole and its CRC32C matched, then SEALED
// and the changed chunks; the final payload is checked and restored as
// any other.

// precopied keeps the assembled base for SEALED and tells the source.
func (t *Target) precopied() []Action {
	t.base, t.asm = t.asm, nil
	f := &pb.RelocationFrame{Frame: &pb.RelocationFrame_Precopied{Precopied: &pb.Precopied{RelocationId: t.idBytes()}}}
	t.lastAnswer = f
	return []Action{Send{Frame: f}}
}

func (t *Target) onPrecopyFrame(f *pb.RelocationFrame) ([]Action, error) {
	switch fr := f.GetFrame().(type) {
	case *pb.RelocationFrame_Chunk:
		if t.asm == nil {
			return nil, nil // the base is whole: a duplicate of one of its chunks
		}
		return t.onChunk(fr.Chunk)
	case *pb.RelocationFrame_Sealed:
		switch {
		case string(fr.Sealed.GetRelocationId()) != string(t.id[:]):
			return t.fail(pb.Code_CODE_PROTOCOL_ERROR, "SEALED of another relocation", false), nil
		case t.sealed:
			return nil, nil // repeated: the first one decides
		case t.base == nil:
			return t.fail(pb.Code_CODE_PROTOCOL_ERROR, "SEALED before the base was assembled", false), nil
		}
		return t.onSealed(fr.Sealed)
	}
	return t.fail(pb.Code_CODE_PROTOCOL_ERROR, frameName(f)+" during a pre-copy", false), nil
}

// onSealed starts the final payload from the base: the chunks SEALED does
// not list are the base's; the listed ones follow.
func (t *Target) onSealed(s *pb.Sealed) ([]Action, error) {
	t.sealed, t.sealedUs = true, s.GetSealedUnixUs()
	m := Manifest{Length: s.GetPayloadLength(), Chunks: s.GetChunkCount(), CRC32C: s.GetCrc32C(), Block: t.base.m.Block}
	asm, err := t.base.Rebase(m, s.GetChanged())
	if err != nil {
		return t.fail(pb.Code_CODE_DATA_LOST, err.Error(), false), nil
	}
	t.base, t.asm = nil, asm
	if asm.Complete() {
		return t.assembled()
	}
	return nil, nil
}

// SealedUnixUs is when the source sealed the object, by its clock: from
// PREPARE, or a pre-copy's SEALED (0 before it). Informational: the
// target's interruption figure counts from it.
func (t *Target) SealedUnixUs() int64 {
	if t.prepare.GetPrecopy() {
		return t.sealedUs
	}
	return t.prepare.GetSealedUnixUs()
}

// repeatedSealed reports whether f is a SEALED repeated after the one the
// target took (ignored, as a duplicate chunk is).
func (t *Target) repeatedSealed(f *pb.RelocationFrame) bool {
	_, ok := f.GetFrame().(*pb.RelocationFrame_Sealed)
	return ok && t.sealed
}
