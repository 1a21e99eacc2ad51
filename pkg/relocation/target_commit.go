package relocation

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The target's cutover and commit: DATA and CUTOVER (after READY, or kept
// before it by an eager cutover), the commit, its read-back, and an Actor
// Join's group read.

// eagerFrame keeps a DATA or CUTOVER frame that an eager cutover sends
// before READY (during the assembly or the restore); it reports whether f
// was one. Each is checked as after READY, once the restore ended.
func (t *Target) eagerFrame(f *pb.RelocationFrame) bool {
	if !t.prepare.GetEagerCutover() {
		return false
	}
	switch f := f.GetFrame().(type) {
	case *pb.RelocationFrame_Data:
		if string(f.Data.GetRelocationId()) != string(t.id[:]) {
			return true
		}
		switch seq := int(f.Data.GetSequence()); {
		case seq < len(t.data):
		case seq > len(t.data) || t.early != nil:
			if t.earlyErr == "" {
				t.earlyErr = fmt.Sprintf("DATA %d after %d", seq, len(t.data))
			}
		default:
			t.data = append(t.data, f.Data.GetRequest())
			t.dataCRC = wire.UpdateCRC32C(t.dataCRC, RequestBytes(f.Data.GetRequest()))
		}
		return true
	case *pb.RelocationFrame_Cutover:
		if string(f.Cutover.GetRelocationId()) == string(t.id[:]) && t.early == nil {
			t.early = f.Cutover
		}
		return true
	}
	return false
}

func (t *Target) onData(d *pb.Data) ([]Action, error) {
	if string(d.GetRelocationId()) != string(t.id[:]) {
		return nil, nil
	}
	switch seq := int(d.GetSequence()); {
	case seq < len(t.data):
		return nil, nil // a duplicate
	case seq > len(t.data):
		// A gap: the stream is ordered, so a DATA request was lost or the
		// peer is not the source. Nothing is committed yet: abort.
		return t.fail(pb.Code_CODE_PROTOCOL_ERROR, fmt.Sprintf("DATA %d after %d", seq, len(t.data)), true), nil
	}
	t.data = append(t.data, d.GetRequest())
	t.dataCRC = wire.UpdateCRC32C(t.dataCRC, RequestBytes(d.GetRequest()))
	return nil, nil
}

// untouched reports whether every participant is still at the store
// version the commit expects.
func (t *Target) untouched(cur map[string]record.Snapshot) bool {
	for _, p := range t.participants {
		c, ok := cur[p.Object.String()]
		if !ok || c.StoreVersion != p.StoreVersion {
			return false
		}
	}
	return true
}

// ownCommit reports whether every participant holds this relocation's
// commit: owned by this target, same object generation, the owner
// generation after the expected one, written by this relocation.
func (t *Target) ownCommit(cur map[string]record.Snapshot) bool {
	for _, p := range t.participants {
		c, ok := cur[p.Object.String()]
		if !ok || c.Record.Owner != t.cfg.Self || c.Record.ObjectGeneration != p.Record.ObjectGeneration ||
			c.Record.AuthorityGeneration != p.Record.AuthorityGeneration+1 || c.Record.LastRelocation != t.id.String() {
			return false
		}
	}
	return true
}

// RequestBytes is the canonical encoding of a request for the CUTOVER CRC.
func RequestBytes(r *pb.CallRequest) []byte {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(r)
	return b
}

func (t *Target) onCutover(c *pb.Cutover) ([]Action, error) {
	if string(c.GetRelocationId()) != string(t.id[:]) {
		return nil, nil
	}
	if int(c.GetDataCount()) != len(t.data) || c.GetDataCrc32C() != t.dataCRC {
		return t.fail(pb.Code_CODE_PROTOCOL_ERROR, fmt.Sprintf("CUTOVER says %d requests (crc %08x), got %d (crc %08x)",
			c.GetDataCount(), c.GetDataCrc32C(), len(t.data), t.dataCRC), true), nil
	}
	t.cutover = true
	return t.commit(), nil
}

func (t *Target) commit() []Action {
	t.phase = TargetCommitting
	if !t.join.IsZero() && t.joinSeen == nil {
		return []Action{ReadGroup{Group: t.join}} // the commit compares it
	}
	return []Action{Commit{RelocationID: t.id, Participants: t.participants, Join: t.joinSeen, Bulk: t.bulk}}
}

// onGroupRead: an Actor Join's group must still be this node's, active,
// for the commit to write the membership.
func (t *Target) onGroupRead(e GroupRead) []Action {
	switch g := e.Snapshot.Record; {
	case e.Err != nil:
		t.retry, t.retryAt = ReadGroup{Group: t.join}, t.nowMs+RetryPauseMs
		return nil
	case g.Owner != t.cfg.Self || g.State != record.StateActive:
		return t.fail(pb.Code_CODE_STALE_FENCE, fmt.Sprintf("join: %s is owned by %s (%s), not by this node", t.join, g.Owner, g.State), true)
	}
	s := e.Snapshot
	t.joinSeen = &s
	return t.commit()
}

func (t *Target) onCommit(e CommitResult) []Action {
	if e.Err != nil {
		t.resolving = true
		t.retry, t.retryAt = ResolveCommit{RelocationID: t.id, Participants: t.participants, Join: t.joinSeen, Bulk: t.bulk}, t.nowMs+RetryPauseMs
		return nil
	}
	if !e.Committed && t.resolving && t.untouched(e.Records) {
		// docs/design.md §3: an uncertain commit is decided again, never taken
		// as a failure. The read-back shows it did not land and nothing else
		// wrote the records: commit again (the same compares keep it safe,
		// and the records are still the source's). A
		// direct refusal of an untouched record is not retried: then the
		// target's own owner key failed the compare.
		t.resolving = false
		return t.commit()
	}
	t.resolving = false
	if !e.Committed && t.ownCommit(e.Records) {
		// An earlier, uncertain attempt landed after its read-back said it
		// had not (etcd may still apply a request whose RPC failed): the
		// records are exactly this relocation's commit. Discarding now
		// would orphan an object the store says this node owns.
		e.Committed = true
	}
	if !e.Committed {
		out := t.fail(pb.Code_CODE_STALE_FENCE, "commit refused: the source's record changed (preserved or moved)", true)
		return out
	}
	primary := e.Records[t.participants[0].Object.String()]
	f := &pb.RelocationFrame{Frame: &pb.RelocationFrame_Outcome{Outcome: &pb.Outcome{
		RelocationId: t.idBytes(), Code: pb.Code_CODE_OK, DataApplied: uint32(len(t.data)),
		Committed: &pb.Fence{OwnerId: primary.Record.Owner.ID, OwnerGeneration: primary.Record.Owner.Generation,
			RoutingId: t.cfg.SelfRoutingID[:], ObjectGeneration: primary.Record.ObjectGeneration,
			AuthorityGeneration: primary.Record.AuthorityGeneration, StoreVersion: primary.StoreVersion},
	}}}
	t.lastAnswer = f
	return []Action{Admit{Committed: e.Records, Data: t.data}, Send{Frame: f}, t.finish(Completed, pb.Code_CODE_OK, "")}
}
