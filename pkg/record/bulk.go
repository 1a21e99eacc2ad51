package record

import (
	"encoding/json"
	"fmt"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// BulkIntentKind marks a relocations/<bulk id> value as a bulk intent (the
// key space also holds a single relocation's listing and, from older
// nodes, a bulk's listing: neither carries it).
const BulkIntentKind = "bulk-intent"

// MaxBulkIntentBytes bounds a stored bulk intent (about 200 bytes an
// object: a bulk of a few hundred objects).
const MaxBulkIntentBytes = 128 << 10

// BulkIntent is the value of relocations/<bulk id> under the one-write
// rule for bulk moves (docs/proposals/one-write-bulk-moves.md): the
// intents of every object of one bulk move, written once by the source
// after it sealed them, instead of one intent in each record. It is not
// bound to the source's lease: a source that dies after its target holds
// the state must not take the move's proof with it. The target checks each
// PREPARE against it, each commit compares its ModRevision, and recovery
// leaves the objects it names to a live target until its deadline passed.
type BulkIntent struct {
	Kind       string     `json:"kind"`
	Source     OwnerRef   `json:"source"`
	Target     OwnerRef   `json:"target"`
	TargetNode NodeRef    `json:"targetNode"`
	DeadlineMs int64      `json:"deadlineUnixMs"`
	Units      []BulkUnit `json:"units"`
}

// BulkUnit is one object's intent within a bulk.
type BulkUnit struct {
	Object       string `json:"object"`
	RelocationID string `json:"relocationId"`
	// NonceHash: as Intent.NonceHash, of this object's relocation.
	NonceHash string `json:"nonceHash"`
	// StoreVersion is the record's ModRevision when the source sealed the
	// object: the key is written only if every record is still at its
	// version, and a commit or a preserve compares it.
	StoreVersion int64 `json:"storeVersion"`
}

// ErrInvalidBulkIntent: a bulk intent is malformed (a request's, or one
// read from etcd).
var ErrInvalidBulkIntent = wire.Sentinel(pb.Code_CODE_INVALID_ARGUMENT, "authority: invalid bulk intent")

// Validate checks every field, with at most maxUnits units.
func (b *BulkIntent) Validate(maxUnits int) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidBulkIntent, fmt.Sprintf(format, a...))
	}
	switch {
	case b.Kind != BulkIntentKind:
		return bad("kind %q", b.Kind)
	case keyspace.ValidateOwnerID(b.Source.ID) != nil || b.Source.Generation <= 0:
		return bad("source %v", b.Source)
	case keyspace.ValidateOwnerID(b.Target.ID) != nil || b.Target.Generation <= 0:
		return bad("target %v", b.Target)
	case b.Source == b.Target:
		return bad("source and target are both %v", b.Source)
	case b.TargetNode.Address == "" || len(b.TargetNode.Address) > 256 || len(b.TargetNode.RoutingID) > 64:
		return bad("target node %+v", b.TargetNode)
	case b.DeadlineMs <= 0:
		return bad("deadline %d", b.DeadlineMs)
	case len(b.Units) == 0 || len(b.Units) > maxUnits:
		return bad("%d objects (1 to %d)", len(b.Units), maxUnits)
	}
	objs := make(map[string]bool, len(b.Units))
	ids := make(map[string]bool, len(b.Units))
	for i, u := range b.Units {
		o, err := keyspace.ParseObject(u.Object)
		switch {
		case err != nil || o.Kind != keyspace.KindActor:
			return bad("unit %d: object %q (an actor's name)", i, u.Object)
		case u.RelocationID == "" || len(u.RelocationID) > 64:
			return bad("unit %d: relocation id %q", i, u.RelocationID)
		case !isHexSHA256(u.NonceHash):
			return bad("unit %d: nonce hash %q", i, u.NonceHash)
		case u.StoreVersion <= 0:
			return bad("unit %d: store version %d", i, u.StoreVersion)
		case objs[u.Object] || ids[u.RelocationID]:
			return bad("unit %d: %s or %s twice", i, u.Object, u.RelocationID)
		}
		objs[u.Object], ids[u.RelocationID] = true, true
	}
	return nil
}

// Unit returns the unit that moves object, if the bulk names it.
func (b *BulkIntent) Unit(object string) (BulkUnit, bool) {
	for _, u := range b.Units {
		if u.Object == object {
			return u, true
		}
	}
	return BulkUnit{}, false
}

// Encode is the stored JSON of b.
func (b *BulkIntent) Encode() []byte {
	out, _ := json.Marshal(b) // plain fields: it always marshals
	return out
}

// DecodeBulkIntent parses and validates a stored bulk intent. found is
// false (and the error nil) for a value of relocations/ that is no bulk
// intent (a single relocation's listing, an older bulk listing).
func DecodeBulkIntent(v []byte, maxUnits int) (b BulkIntent, found bool, err error) {
	if len(v) > MaxBulkIntentBytes {
		return BulkIntent{}, false, fmt.Errorf("%w: %d bytes (at most %d)", ErrInvalidBulkIntent, len(v), MaxBulkIntentBytes)
	}
	var head struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(v, &head); err != nil {
		return BulkIntent{}, false, fmt.Errorf("%w: %v", ErrInvalidBulkIntent, err)
	}
	if head.Kind != BulkIntentKind {
		return BulkIntent{}, false, nil
	}
	if err := json.Unmarshal(v, &b); err != nil {
		return BulkIntent{}, false, fmt.Errorf("%w: %v", ErrInvalidBulkIntent, err)
	}
	if err := b.Validate(maxUnits); err != nil {
		return BulkIntent{}, false, err
	}
	return b, true, nil
}

func isHexSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
