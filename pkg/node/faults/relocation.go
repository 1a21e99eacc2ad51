//go:build failpoints

package faults

import (
	"context"

	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/internal/relocator"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// SourceMailbox wraps a source relocation's mailbox (relocation id) with
// its faults.
func SourceMailbox(m relocator.SourceMailbox, id wire.RelocationID) relocator.SourceMailbox {
	return &sourceMailboxFaults{SourceMailbox: m, id: id}
}

// SourcePeer wraps a source relocation's stream with its faults.
func SourcePeer(p relocator.Peer) relocator.Peer { return &sourcePeerFaults{Peer: p} }

// TargetPeer wraps a target stage's stream, before its first frame is
// read, with its planted bugs.
func TargetPeer(p relocator.Peer) relocator.Peer {
	return &recycleEarly{Peer: &crcIgnored{Peer: p}}
}

// Target wraps a target stage's store and mailbox with their faults.
// withoutCompare is the store's commit that drops its compares (the
// planted commit-without-compare; bulk: the stage is part of a bulk move);
// ackBeforeCommit runs the stage's captured and DATA requests before the
// commit (the planted ack-before-commit) and reports whether it ran any,
// which Admit then skips.
func Target(st relocator.Store, box relocator.TargetMailbox, bulk bool,
	withoutCompare func(context.Context, authority.CommitRequest) (authority.CommitResult, error),
	ackBeforeCommit func(authority.CommitRequest) bool) (relocator.Store, relocator.TargetMailbox) {
	fs := &targetStoreFaults{Store: st, withoutCompare: withoutCompare, bulk: bulk, ackBeforeCommit: ackBeforeCommit}
	return fs, &targetMailboxFaults{TargetMailbox: box, store: fs}
}

// sourceMailboxFaults: source.after-seal, and the planted bugs
// dedup-not-transferred (an empty de-duplication table travels) and
// outbox-not-transferred (an empty outbox travels).
type sourceMailboxFaults struct {
	relocator.SourceMailbox
	id wire.RelocationID
}

func (m *sourceMailboxFaults) Seal(ctx context.Context, a relocation.Seal) ([][]byte, error) {
	segs, err := m.SourceMailbox.Seal(ctx, a)
	if err == nil {
		err = failpoint.Hit(failpoint.SourceAfterSeal)
	}
	if err != nil {
		return segs, err
	}
	return dedupNotTransferred(m.id, segs)
}

func dedupNotTransferred(id wire.RelocationID, segs [][]byte) ([][]byte, error) {
	var payload []byte
	for _, s := range segs {
		payload = append(payload, s...)
	}
	env, states, err := relocation.DecodePayload(payload)
	if err != nil {
		return segs, nil
	}
	changed := false
	for _, ps := range env.GetParticipants() {
		if len(ps.GetOutbox()) > 0 && failpoint.Planted(failpoint.BugOutboxNotTransferred) {
			ps.Outbox = nil
			changed = true
		}
		t, err := actor.DecodeReplyTable(ps.GetReplies())
		if err != nil || t.Len() == 0 || !failpoint.Planted(failpoint.BugDedupNotTransferred) {
			continue
		}
		ps.Replies = actor.NewReplyTable(t.Window(), t.MaxEntries()).Encode()
		changed = true
	}
	if !changed {
		return segs, nil
	}
	return relocation.EncodeEnvelope(id, env.GetParticipants(), states)
}

// sourcePeerFaults: source.chunk, source.chunk-data (corrupt),
// source.after-last-chunk, source.before-cutover (DATA and CUTOVER never
// leave); the planted bug delta-skips-chunk.
type sourcePeerFaults struct {
	relocator.Peer
	chunks   uint32
	boundary int // 0: not reached; 1: sending; -1: swallowed
	// sealed: SEALED went out (the chunks that follow are the delta);
	// skip: the delta chunk the planted bug leaves out, plus one (0: none).
	sealed bool
	skip   uint32
}

func (p *sourcePeerFaults) Send(f *pb.RelocationFrame) error {
	switch {
	case f.GetPrepare() != nil:
		p.chunks = f.GetPrepare().GetChunkCount()
	case f.GetSealed() != nil:
		p.sealed = true
		if failpoint.Planted(failpoint.BugDeltaSkipsChunk) {
			f = p.skipChanged(f)
		}
	case f.GetChunk() != nil:
		c := f.GetChunk()
		if p.sealed && p.skip == c.GetIndex()+1 {
			return nil // the planted bug: the chunk SEALED no longer lists
		}
		if err := failpoint.Hit(failpoint.SourceChunk); err != nil {
			return err
		}
		if data := failpoint.Corrupt(failpoint.SourceChunkData, c.GetData()); !sameBytes(data, c.GetData()) {
			f = &pb.RelocationFrame{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{RelocationId: c.GetRelocationId(), Index: c.GetIndex(), Data: data, Crc32C: c.Crc32C}}}
		}
		if err := p.Peer.Send(f); err != nil {
			return err
		}
		if c.GetIndex()+1 == p.chunks {
			return failpoint.Hit(failpoint.SourceAfterLastChunk)
		}
		return nil
	case f.GetData() != nil || f.GetCutover() != nil:
		if p.boundary == 0 {
			p.boundary = 1
			if failpoint.Hit(failpoint.SourceBeforeCutover) != nil {
				p.boundary = -1 // nothing sent: the target's fallback decides
			}
		}
		if p.boundary < 0 {
			return nil
		}
	}
	return p.Peer.Send(f)
}

// skipChanged is the planted bug delta-skips-chunk: SEALED without one
// changed chunk that the base also holds at full length (one the target
// does not ask for by itself; of the state, if one changed, else the
// envelope's), which is then not sent.
func (p *sourcePeerFaults) skipChanged(f *pb.RelocationFrame) *pb.RelocationFrame {
	s := f.GetSealed()
	pick := -1
	for k, i := range s.GetChanged() {
		if i+1 < p.chunks && (pick < 0 || s.GetChanged()[pick] == 0) {
			pick = k // a chunk of the state rather than the envelope's, if one changed
		}
	}
	for k, i := range s.GetChanged() {
		if k == pick {
			p.skip = i + 1
			changed := append(append([]uint32(nil), s.GetChanged()[:k]...), s.GetChanged()[k+1:]...)
			return &pb.RelocationFrame{Frame: &pb.RelocationFrame_Sealed{Sealed: &pb.Sealed{RelocationId: s.GetRelocationId(),
				PayloadLength: s.GetPayloadLength(), ChunkCount: s.GetChunkCount(), Crc32C: s.GetCrc32C(), SealedUnixUs: s.GetSealedUnixUs(), Changed: changed}}}
		}
	}
	return f
}

// crcIgnored: the planted bug crc-ignored. The target reads a stage's
// chunks ahead of its PREPARE; when their CRC32C differ from what PREPARE
// and the chunks announce, it rewrites the announcements to match, so the
// corrupted payload is assembled and installed.
type crcIgnored struct {
	relocator.Peer
	ahead []*pb.RelocationFrame
	err   error
}

// Recycle passes the relocation's Recycle on to the stream (relocator.Recycler).
func (p *crcIgnored) Recycle(d []byte) { recycle(p.Peer, d) }

func recycle(p relocator.Peer, d []byte) {
	if r, ok := p.(relocator.Recycler); ok {
		r.Recycle(d)
	}
}

// recycleEarly: the planted bug recycle-early. The target gives each
// received chunk's buffer back two chunks later, whether or not the
// assembly copied it: the first half of a state of several chunks, kept as
// it came (its CRC32C checked as it landed), is overwritten by later
// chunks received into the same buffers, which the protocol does not see;
// a chunk overwritten before it was even added fails its CRC32C.
type recycleEarly struct {
	relocator.Peer
	recent [][]byte // the data of the last chunks received, oldest first
}

func (p *recycleEarly) Recv() (*pb.RelocationFrame, error) {
	f, err := p.Peer.Recv()
	if c := f.GetChunk(); c != nil && failpoint.Planted(failpoint.BugRecycleEarly) {
		p.recent = append(p.recent, c.GetData())
		if len(p.recent) > 2 {
			recycle(p.Peer, p.recent[0])
			p.recent = p.recent[1:]
		}
	}
	return f, err
}

func (p *recycleEarly) Recycle(d []byte) { recycle(p.Peer, d) }

func (p *crcIgnored) Recv() (*pb.RelocationFrame, error) {
	if len(p.ahead) > 0 {
		f := p.ahead[0]
		p.ahead = p.ahead[1:]
		return f, nil
	}
	if p.err != nil {
		return nil, p.err
	}
	f, err := p.Peer.Recv()
	prep := f.GetPrepare()
	if err != nil || prep == nil || prep.GetChunkCount() == 0 || !failpoint.Planted(failpoint.BugCRCIgnored) {
		return f, err
	}
	var chunks []*pb.StateChunk
	for len(chunks) < int(prep.GetChunkCount()) {
		g, err := p.Peer.Recv()
		if err != nil {
			p.err = err
			break
		}
		p.ahead = append(p.ahead, g)
		c := g.GetChunk()
		if c == nil || c.GetIndex() != uint32(len(chunks)) {
			break
		}
		chunks = append(chunks, c)
	}
	if len(chunks) != int(prep.GetChunkCount()) {
		return f, nil
	}
	var crc uint32
	for _, c := range chunks {
		sum := wire.CRC32C(c.GetData())
		crc = wire.CombineCRC32C(crc, sum, int64(len(c.GetData())))
		c.Crc32C = &sum
	}
	if crc != prep.GetCrc32C() {
		prep.Crc32C = crc
	}
	return f, nil
}

// targetStoreFaults: target.before-commit, target.after-commit (the reply
// is lost), and the planted bugs commit-without-compare,
// bulk-commit-ignores-compare (a bulk move's stage only) and
// ack-before-commit.
type targetStoreFaults struct {
	relocator.Store
	withoutCompare  func(context.Context, authority.CommitRequest) (authority.CommitResult, error)
	bulk            bool
	ackBeforeCommit func(authority.CommitRequest) bool
	acked           bool // ack-before-commit ran the captured and DATA requests already
}

func (s *targetStoreFaults) Commit(ctx context.Context, req authority.CommitRequest) (authority.CommitResult, error) {
	if !s.acked && failpoint.Planted(failpoint.BugAckBeforeCommit) {
		s.acked = s.ackBeforeCommit(req)
	}
	if err := failpoint.Hit(failpoint.TargetBeforeCommit); err != nil {
		return authority.CommitResult{}, err
	}
	// A sleep here models a commit delayed on its way to etcd: the request
	// still lands, however long it took, so the time it waited does not
	// cut it short (the driver's context may have expired meanwhile).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), relocator.DefaultOpTimeout)
	defer cancel()
	commit := s.Store.Commit
	if failpoint.Planted(failpoint.BugCommitWithoutCompare) || s.bulk && failpoint.Planted(failpoint.BugBulkCommitIgnoresCompare) {
		commit = s.withoutCompare
	}
	res, err := commit(ctx, req)
	if ferr := failpoint.Hit(failpoint.TargetAfterCommit); ferr != nil {
		return authority.CommitResult{}, ferr // the reply "was lost": resolved by read-back
	}
	return res, err
}

// targetMailboxFaults: target.before-ready, target.before-replay.
type targetMailboxFaults struct {
	relocator.TargetMailbox
	store *targetStoreFaults
}

func (m *targetMailboxFaults) Restore(payload []byte) error {
	if err := m.TargetMailbox.Restore(payload); err != nil {
		return err
	}
	if err := failpoint.Hit(failpoint.TargetBeforeReady); err != nil {
		m.TargetMailbox.Discard()
		return err
	}
	return nil
}

func (m *targetMailboxFaults) Admit(a relocation.Admit) {
	_ = failpoint.Hit(failpoint.TargetBeforeReplay)
	if m.store.acked {
		a.Data = nil // run before the commit already (planted ack-before-commit)
	}
	m.TargetMailbox.Admit(a)
}

// sameBytes reports whether a and b are the same memory (Corrupt returns
// its input when it did not fire, a copy when it did).
func sameBytes(a, b []byte) bool { return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) }
