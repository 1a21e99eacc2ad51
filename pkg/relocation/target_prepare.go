package relocation

import (
	"crypto/sha256"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The target's checks of PREPARE: who may send it, what it must name, and
// what a repeated one gets.
// Fingerprint is the SHA-256 of a PREPARE's deterministic protobuf encoding.
func Fingerprint(p *pb.Prepare) [32]byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(p)
	if err != nil {
		return [32]byte{}
	}
	return sha256.Sum256(b)
}

// PrepareEvent is a PREPARE with the target's local facts at arrival.
type PrepareEvent struct {
	Prepare  *pb.Prepare
	NowMs    int64
	Draining bool
	// Busy: a bound of the node on incoming stages was reached (the
	// driver's count of stages, per peer and in all, or of the bytes they
	// announce); it names the bound. Refused: CODE_RESOURCE_EXHAUSTED.
	Busy string
	// Duplicate: a stage of the same relocation is in flight on this node
	// (on another stream). Refused: CODE_PROTOCOL_ERROR.
	Duplicate bool
	// Peer is the owner id the stream's verified certificate names (mutual
	// TLS; empty without): PREPARE must come from its coordinator, the
	// source whose intent etcd holds. Otherwise CODE_PERMISSION_DENIED.
	Peer string
	// Bulk: for a PREPARE that names a bulk (bulk_id), its key as the
	// driver read it (target_bulk.go).
	Bulk *BulkKey
}

func (PrepareEvent) event() {}

func (t *Target) onPrepare(e PrepareEvent) ([]Action, error) {
	p := e.Prepare
	id, err := wire.ParseRelocationIDBytes(p.GetRelocationId())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	t.id, t.prepare, t.fingerprint = id, p, Fingerprint(p)
	t.phase = TargetAssembling
	// design.md §4 step 4: a node that is shutting down refuses before staging anything.
	if e.Draining {
		return t.fail(pb.Code_CODE_SHUTTING_DOWN, "target is draining", false), nil
	}
	if e.Duplicate {
		return t.fail(pb.Code_CODE_PROTOCOL_ERROR, "a stage of this relocation is in flight on this node", false), nil
	}
	if e.Busy != "" {
		return t.fail(pb.Code_CODE_RESOURCE_EXHAUSTED, "target busy: "+e.Busy, false), nil
	}
	if e.Peer != "" && e.Peer != p.GetCoordinator().GetOwnerId() {
		return t.fail(pb.Code_CODE_PERMISSION_DENIED, fmt.Sprintf("PREPARE from node %s names coordinator %s", e.Peer, p.GetCoordinator().GetOwnerId()), false), nil
	}
	if p.GetVersion() != wire.Version {
		return t.fail(pb.Code_CODE_PROTOCOL_ERROR, fmt.Sprintf("wire version %d", p.GetVersion()), false), nil
	}
	tf := p.GetTarget()
	if tf.GetOwnerId() != t.cfg.Self.ID || tf.GetOwnerGeneration() != t.cfg.Self.Generation || !t.cfg.SelfRoutingID.Equal(tf.GetRoutingId()) {
		return t.fail(pb.Code_CODE_STALE_FENCE, fmt.Sprintf("target fence %s@%d does not match this owner %s", tf.GetOwnerId(), tf.GetOwnerGeneration(), t.cfg.Self), false), nil
	}
	if p.GetApplicationVersion() != t.cfg.AppVersion {
		return t.fail(pb.Code_CODE_PROTOCOL_ERROR, fmt.Sprintf("application version %q, this node runs %q", p.GetApplicationVersion(), t.cfg.AppVersion), false), nil
	}
	if e.NowMs >= p.GetDeadlineUnixMs() {
		return t.fail(pb.Code_CODE_DEADLINE_EXCEEDED, "PREPARE arrived after its deadline", false), nil
	}
	if m := t.cfg.MaxDeadlineMs; m > 0 && p.GetDeadlineUnixMs()-e.NowMs > m {
		return t.fail(pb.Code_CODE_RESOURCE_EXHAUSTED, fmt.Sprintf("deadline %d ms ahead, this node allows at most %d", p.GetDeadlineUnixMs()-e.NowMs, m), false), nil
	}
	if e.Bulk != nil && e.Bulk.Err != nil && e.Bulk.ID == p.GetBulkId() {
		return t.fail(pb.Code_CODE_UNAVAILABLE, "bulk intent unread: "+e.Bulk.Err.Error(), false), nil
	}
	parts, err := participants(p)
	switch {
	case err == nil && p.GetBulkId() != "":
		err = t.checkBulkIntent(e, parts) // target_bulk.go
	case err == nil:
		err = t.checkIntent(p, parts)
	}
	if err == nil {
		t.join, err = checkGroups(p, parts)
	}
	if err != nil {
		return t.fail(pb.Code_CODE_PROTOCOL_ERROR, err.Error(), false), nil
	}
	t.participants = parts
	m := Manifest{Length: p.GetPayloadLength(), Chunks: p.GetChunkCount(), CRC32C: p.GetCrc32C()}
	switch {
	case p.GetPrecopy() && (p.GetEagerCutover() || p.GetChunkSize() == 0):
		return t.fail(pb.Code_CODE_PROTOCOL_ERROR, "a pre-copy needs a chunk size and no eager cutover", false), nil
	case !p.GetPrecopy() && p.GetChunkSize() != 0:
		return t.fail(pb.Code_CODE_PROTOCOL_ERROR, "a chunk size without pre-copy", false), nil
	case p.GetPrecopy():
		m.Block = uint64(p.GetChunkSize())
	}
	asm, err := NewAssembly(m)
	if err != nil {
		return t.fail(pb.Code_CODE_DATA_LOST, err.Error(), false), nil
	}
	asm.alloc = t.cfg.Alloc
	t.asm = asm
	return nil, nil
}

// participants turns PREPARE's participants into the expected records the
// commit compares: the coordinator's owner and the captured generations.
func participants(p *pb.Prepare) ([]record.Snapshot, error) {
	if len(p.GetParticipants()) == 0 {
		return nil, fmt.Errorf("%w: no participants", ErrProtocol)
	}
	c := p.GetCoordinator()
	out := make([]record.Snapshot, 0, len(p.GetParticipants()))
	for _, pp := range p.GetParticipants() {
		obj, err := keyspace.ParseObject(pp.GetObject())
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrProtocol, err)
		}
		if pp.GetStoreVersion() <= 0 || pp.GetObjectGeneration() <= 0 || pp.GetAuthorityGeneration() <= 0 {
			return nil, fmt.Errorf("%w: participant %s without generations", ErrProtocol, obj)
		}
		rec := record.Record{
			Kind: obj.Kind, Type: pp.GetType(), ObjectGeneration: pp.GetObjectGeneration(), AuthorityGeneration: pp.GetAuthorityGeneration(),
			Owner: record.OwnerRef{ID: c.GetOwnerId(), Generation: c.GetOwnerGeneration()},
		}
		if b := pp.GetRecord(); len(b) > 0 {
			full, err := record.DecodeRecord(b)
			if err != nil {
				return nil, fmt.Errorf("%w: participant %s: %v", ErrProtocol, obj, err)
			}
			if full.Kind != rec.Kind || full.ObjectGeneration != rec.ObjectGeneration || full.AuthorityGeneration != rec.AuthorityGeneration || full.Owner != rec.Owner {
				return nil, fmt.Errorf("%w: participant %s: record disagrees with its fence", ErrProtocol, obj)
			}
			rec = full
		}
		out = append(out, record.Snapshot{Object: obj, StoreVersion: pp.GetStoreVersion(), Record: rec})
	}
	return out, nil
}

// checkIntent refuses a PREPARE that is not bound to its intent (docs/design.md
// §3), before anything is staged: every participant's record must carry
// this relocation's intent naming this target, its node and the PREPARE's
// deadline, owned by the coordinator at its node, and the intent's nonce
// hash must be the hash of PREPARE's nonce. The records come from the peer;
// the commit compares their exact bytes in etcd, so what is checked here is
// what etcd holds, or nothing commits.
func (t *Target) checkIntent(p *pb.Prepare, parts []record.Snapshot) error {
	c := p.GetCoordinator()
	if len(p.GetNonce()) != wire.NonceLen {
		return fmt.Errorf("%w: PREPARE nonce of %d bytes, want %d", ErrProtocol, len(p.GetNonce()), wire.NonceLen)
	}
	nonce := record.HashNonce(p.GetNonce())
	for _, pp := range parts {
		r := pp.Record
		if err := r.IntendedFor(t.id.String(), t.cfg.Self); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrProtocol, pp.Object, err)
		}
		in := r.Intent
		switch {
		case !t.cfg.SelfRoutingID.Equal(hexBytes(in.TargetNode.RoutingID)):
			return fmt.Errorf("%w: %s: the intent names target node %s, this node is %s", ErrProtocol, pp.Object, in.TargetNode.RoutingID, t.cfg.SelfRoutingID.Hex())
		case in.DeadlineMs != p.GetDeadlineUnixMs():
			return fmt.Errorf("%w: %s: the intent's deadline is %d, PREPARE says %d", ErrProtocol, pp.Object, in.DeadlineMs, p.GetDeadlineUnixMs())
		case in.NonceHash != nonce:
			return fmt.Errorf("%w: %s: PREPARE's nonce does not match the intent", ErrProtocol, pp.Object)
		case hexString(c.GetRoutingId()) != r.Node.RoutingID:
			return fmt.Errorf("%w: %s: the record names node %s, the coordinator is %x", ErrProtocol, pp.Object, r.Node.RoutingID, c.GetRoutingId())
		}
	}
	return nil
}

// repeatedPrepare: same bytes → the same answer; other bytes under the same
// identity → protocol error, nothing changes.
func (t *Target) repeatedPrepare(p *pb.Prepare) ([]Action, error) {
	if Fingerprint(p) != t.fingerprint {
		f := &pb.RelocationFrame{Frame: &pb.RelocationFrame_Failed{Failed: &pb.Failed{RelocationId: p.GetRelocationId(),
			Code: pb.Code_CODE_PROTOCOL_ERROR, Message: "PREPARE repeated with other bytes"}}}
		return []Action{Send{Frame: f}}, nil
	}
	if t.lastAnswer != nil {
		return []Action{Send{Frame: t.lastAnswer}}, nil
	}
	return nil, nil // still assembling or restoring: the answer comes
}
