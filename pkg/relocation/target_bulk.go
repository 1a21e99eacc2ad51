package relocation

import (
	"fmt"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/wire"
)

// The one-write rule's target side (docs/proposals/one-write-bulk-moves.md):
// a PREPARE that names a bulk (bulk_id) carries a record without an
// intent; its intent is in relocations/<bulk_id>, which the driver reads
// once per bulk and hands in with each PREPARE of it (PrepareEvent.Bulk).
// The machine reads nothing itself.

// BulkKey is a bulk's key as the target's driver read it.
type BulkKey struct {
	ID     string
	Intent record.BulkIntent
	// Revision is the key's ModRevision: each commit of the bulk compares it.
	Revision int64
	// Found: the key holds a bulk intent (false: no key, or none under it).
	Found bool
	// Err: the read failed (the PREPARE is refused as unavailable).
	Err error
}

// BulkRef is what a bulk unit's commit compares besides its record: its
// bulk's key, still at the revision the target read.
type BulkRef struct {
	ID       string
	Revision int64
}

// checkBulkIntent is checkIntent for a PREPARE that names a bulk: it must
// move one actor outside any group, whose record as the source sealed it
// is active and carries no intent, owned by the coordinator at its node;
// the bulk key the driver read must be that bulk's, from this source (the
// coordinator, whom a verified peer certificate must name too) to this
// target and node, with the PREPARE's deadline, and name this object under
// this relocation id, at the PREPARE's store version, with the hash of its
// nonce. The commit compares the record's bytes and version and the key's
// revision, so what is checked here is what etcd holds, or nothing commits.
func (t *Target) checkBulkIntent(e PrepareEvent, parts []record.Snapshot) error {
	p, key := e.Prepare, e.Bulk
	id := p.GetBulkId()
	switch {
	case keyspace.ValidateOwnerID(id) != nil:
		return fmt.Errorf("%w: bulk id %q", ErrProtocol, id)
	case key == nil || key.ID != id:
		return fmt.Errorf("%w: no bulk intent was read for bulk %s", ErrProtocol, id)
	case !key.Found:
		return fmt.Errorf("%w: bulk %s has no intent in etcd", ErrProtocol, id)
	case len(parts) != 1 || parts[0].Object.Kind != keyspace.KindActor || p.GetJoinGroup() != "":
		return fmt.Errorf("%w: a bulk unit moves one actor, without a join", ErrProtocol)
	case len(p.GetNonce()) != wire.NonceLen:
		return fmt.Errorf("%w: PREPARE nonce of %d bytes, want %d", ErrProtocol, len(p.GetNonce()), wire.NonceLen)
	}
	c, in, part := p.GetCoordinator(), key.Intent, parts[0]
	switch {
	case in.Source.ID != c.GetOwnerId() || in.Source.Generation != c.GetOwnerGeneration():
		return fmt.Errorf("%w: bulk %s is from %s, PREPARE's coordinator is %s@%d", ErrProtocol, id, in.Source, c.GetOwnerId(), c.GetOwnerGeneration())
	case in.Target != t.cfg.Self || !t.cfg.SelfRoutingID.Equal(hexBytes(in.TargetNode.RoutingID)):
		return fmt.Errorf("%w: bulk %s goes to %s at node %s, not this one", ErrProtocol, id, in.Target, in.TargetNode.RoutingID)
	case in.DeadlineMs != p.GetDeadlineUnixMs():
		return fmt.Errorf("%w: bulk %s's deadline is %d, PREPARE says %d", ErrProtocol, id, in.DeadlineMs, p.GetDeadlineUnixMs())
	}
	u, ok := in.Unit(part.Object.String())
	switch {
	case !ok:
		return fmt.Errorf("%w: bulk %s does not name %s", ErrProtocol, id, part.Object)
	case u.RelocationID != t.id.String():
		return fmt.Errorf("%w: bulk %s moves %s as relocation %s", ErrProtocol, id, part.Object, u.RelocationID)
	case u.StoreVersion != part.StoreVersion:
		return fmt.Errorf("%w: bulk %s names %s at store version %d, PREPARE at %d", ErrProtocol, id, part.Object, u.StoreVersion, part.StoreVersion)
	case u.NonceHash != record.HashNonce(p.GetNonce()):
		return fmt.Errorf("%w: %s: PREPARE's nonce does not match the bulk intent", ErrProtocol, part.Object)
	}
	r := part.Record
	switch {
	case r.State != record.StateActive || r.Intent != nil || r.Group != "":
		return fmt.Errorf("%w: %s: a bulk unit's record is active, outside any group, without an intent", ErrProtocol, part.Object)
	case hexString(c.GetRoutingId()) != r.Node.RoutingID:
		return fmt.Errorf("%w: %s: the record names node %s, the coordinator is %x", ErrProtocol, part.Object, r.Node.RoutingID, c.GetRoutingId())
	}
	t.bulk = &BulkRef{ID: id, Revision: key.Revision}
	return nil
}
