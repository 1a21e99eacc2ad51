package relocation

import (
	"fmt"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The source's pre-copy (precopy.go): SourceIntent → SourcePrecopying
// (Snapshot; PREPARE and the base; wait for PRECOPIED) → SourceCapturing
// (Seal) → SourcePreparing (SEALED and the changed chunks) → as without.

// precopy reports whether this relocation starts with a pre-copy: enabled,
// and a state known to be at least PrecopyMinBytes. A state of unknown
// size is sealed as usual: a snapshot just to learn it would wait behind
// the object's queue and let it run before the seal.
func (s *Source) precopy() bool {
	min := s.cfg.PrecopyMinBytes
	return min > 0 && s.cfg.StateBytes >= min
}

// PrecopyChunkBytes bounds the chunks of a pre-copy (ChunkSize, if
// smaller): the envelope's chunk, sent again after every seal, and each
// chunk a write touches cost this much in the interruption, while the
// base streams before it, where more frames cost nothing that waits.
const PrecopyChunkBytes = 64 << 10

// PrecopyRoom is how far after its envelope a pre-copy's base starts its
// states: the sealed envelope may be that much longer (a reply table
// that filled up meanwhile: 4,096 small replies take about 150 KiB) and
// the states still start where they did. Beyond it every chunk moves
// and is sent again (correct, only slower).
const PrecopyRoom = 256 << 10

func (s *Source) precopyChunk() int { return min(max(s.cfg.ChunkSize, 1), PrecopyChunkBytes) }

func (s *Source) stepPrecopying(ev Event) ([]Action, error) {
	switch e := ev.(type) {
	case Snapshotted:
		n := segsLen(e.Segments)
		if e.Err != nil || n < uint64(s.cfg.PrecopyMinBytes) || chunkCount(n, s.precopyChunk()) < 2 {
			// No base worth sending: a plain relocation, nothing sent yet.
			s.phase = SourceCapturing
			return []Action{Seal{Participants: s.Participants()}}, nil
		}
		s.base = e.Segments
		s.baseManifest = PlanBlocks(e.Segments, s.precopyChunk())
		s.manifest = s.baseManifest
		s.prepare = s.buildPrepare()
		s.prepare.Precopy = true
		s.prepare.ChunkSize = uint32(s.baseManifest.Block)
		return []Action{
			Send{Frame: &pb.RelocationFrame{Frame: &pb.RelocationFrame_Prepare{Prepare: s.prepare}}},
			StreamChunks{Segments: e.Segments, Manifest: s.baseManifest},
		}, nil
	case Received:
		if s.prepare == nil {
			return nil, fmt.Errorf("%w: %s before PREPARE", ErrProtocol, frameName(e.Frame))
		}
		switch f := e.Frame.GetFrame().(type) {
		case *pb.RelocationFrame_Precopied:
			if !s.sameID(f.Precopied.GetRelocationId()) {
				return nil, fmt.Errorf("%w: PRECOPIED for another relocation", ErrProtocol)
			}
			s.phase = SourceCapturing
			return []Action{Seal{Participants: s.Participants(), Align: int(s.baseManifest.Block), Start: statesAt(s.base)}}, nil
		case *pb.RelocationFrame_Failed:
			if !s.sameID(f.Failed.GetRelocationId()) {
				return nil, fmt.Errorf("%w: FAILED for another relocation", ErrProtocol)
			}
			return s.abort(f.Failed.GetCode(), "target refused the pre-copy: "+f.Failed.GetMessage()), nil
		}
		return nil, fmt.Errorf("%w: %s before PRECOPIED", ErrProtocol, frameName(e.Frame))
	case StreamBroken:
		if s.prepare == nil {
			return nil, nil // sending PREPARE fails next and aborts
		}
		return s.abort(pb.Code_CODE_UNAVAILABLE, "stream to the target broke during the pre-copy"), nil
	case Tick:
		if s.prepare != nil && e.NowMs >= s.cfg.DeadlineMs {
			return s.abort(pb.Code_CODE_DEADLINE_EXCEEDED, "no PRECOPIED before the deadline"), nil
		}
		return nil, nil
	case Stop:
		if s.prepare == nil {
			return nil, nil // the snapshot's result comes next
		}
		return s.abort(pb.Code_CODE_SHUTTING_DOWN, "source stopping during the pre-copy"), nil
	case Observed:
		return nil, nil
	}
	return nil, invalid(s.phase, ev)
}

// sealedDelta: the object is sealed and captured as segs; SEALED announces
// the final payload and the chunks that differ from the base, which
// follow. The base is let go.
func (s *Source) sealedDelta(segs [][]byte, sealedUs int64) []Action {
	s.nowMs = max(s.nowMs, sealedUs/1000)
	m, changed := PlanDelta(s.base, s.baseManifest, segs)
	s.base, s.manifest = nil, m
	if changed == nil {
		changed = []uint32{} // not nil: StreamChunks sends none, not all
	}
	s.phase = SourcePreparing
	sealed := &pb.Sealed{RelocationId: s.cfg.ID[:], PayloadLength: m.Length, ChunkCount: m.Chunks, Crc32C: m.CRC32C,
		SealedUnixUs: sealedUs, Changed: changed}
	return []Action{
		Send{Frame: &pb.RelocationFrame{Frame: &pb.RelocationFrame_Sealed{Sealed: sealed}}},
		StreamChunks{Segments: segs, Manifest: m, Only: changed},
	}
}

// duringPrecopySeal takes a frame that came while the seal ran: after a
// pre-copy the target may repeat PRECOPIED, or give up (FAILED, kept
// until the capture's result: then the source preserves). Nothing else
// can come before SEALED.
func (s *Source) duringPrecopySeal(f *pb.RelocationFrame) ([]Action, error) {
	if s.prepare != nil {
		switch fr := f.GetFrame().(type) {
		case *pb.RelocationFrame_Precopied:
			return nil, nil
		case *pb.RelocationFrame_Failed:
			if !s.sameID(fr.Failed.GetRelocationId()) {
				return nil, fmt.Errorf("%w: FAILED for another relocation", ErrProtocol)
			}
			if s.refused == nil {
				s.refused = fr.Failed
			}
			return nil, nil
		}
	}
	return nil, fmt.Errorf("%w: %s before the seal", ErrProtocol, frameName(f))
}
