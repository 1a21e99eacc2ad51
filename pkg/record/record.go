// Package record holds the pure data of meshloc's authority records
// (design.md §2): the record, its snapshot at a store version, owner and node
// references, fences and multi-key views. It imports no etcd, so the pure
// relocation machines can use it; pkg/authority reads and writes it.
package record

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	gojson "github.com/goccy/go-json"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// State of an authority record.
type State string

// Record states.
const (
	StateActive     State = "active"
	StateRelocating State = "relocating"
	// StateSleeping: the object is asleep (docs/developing/lifecycle.md). Its record
	// names no owner and no node; its state, for a durable type, is in
	// state/<object>. The next call wakes it on a node placement chooses.
	StateSleeping State = "sleeping"
)

// Asleep reports whether r is the record of a sleeping object.
func (r Record) Asleep() bool { return r.State == StateSleeping }

// OwnerRef names an owner: the pair (ownerId, owner generation). A restarted
// node is a different owner.
type OwnerRef struct {
	ID         string `json:"id"`
	Generation int64  `json:"generation"` // CreateRevision of owners/<id>
}

func (o OwnerRef) String() string { return fmt.Sprintf("%s@%d", o.ID, o.Generation) }

// IsZero reports whether o is unset.
func (o OwnerRef) IsZero() bool { return o == OwnerRef{} }

// NodeRef is where an owner is reached.
type NodeRef struct {
	RoutingID string `json:"routingId"` // 16 bytes, lowercase hex
	Address   string `json:"address"`   // gRPC host:port
}

// Intent marks a relocation in flight on the record.
type Intent struct {
	RelocationID string   `json:"relocationId"`
	Target       OwnerRef `json:"target"`
	TargetNode   NodeRef  `json:"targetNode"`
	DeadlineMs   int64    `json:"deadlineUnixMs"`
	// NonceHash is the lowercase hex SHA-256 of a secret the source made
	// for this relocation and sends only in its PREPARE (HashNonce). The
	// record is public (the location API shows it); the nonce is not, so a
	// PREPARE that carries it comes from the node that wrote the intent.
	NonceHash string `json:"nonceHash,omitempty"`
}

// HashNonce is the NonceHash of a relocation's nonce.
func HashNonce(nonce []byte) string {
	h := sha256.Sum256(nonce)
	return hex.EncodeToString(h[:])
}

// ErrNotIntended: a record does not carry the relocation intent a commit or
// a PREPARE claims (design.md §3: a commit is valid only for its own intent).
var ErrNotIntended = wire.Sentinel(pb.Code_CODE_PROTOCOL_ERROR, "authority: record does not carry this relocation's intent")

// IntendedFor checks that r is relocating under the intent of relocation id
// naming target: the one rule a target's PREPARE and every commit are held
// to (the commit transaction then compares the record's exact bytes, so
// what was checked here is what etcd holds).
func (r *Record) IntendedFor(id string, target OwnerRef) error {
	switch {
	case r.State != StateRelocating || r.Intent == nil:
		return fmt.Errorf("%w: %s: not relocating", ErrNotIntended, id)
	case r.Intent.RelocationID != id:
		return fmt.Errorf("%w: %s: the record's intent is relocation %s", ErrNotIntended, id, r.Intent.RelocationID)
	case r.Intent.Target != target:
		return fmt.Errorf("%w: %s: the intent names target %s, not %s", ErrNotIntended, id, r.Intent.Target, target)
	}
	return nil
}

// Record is the authority record of one object (design.md §2): who owns it.
type Record struct {
	Kind             string `json:"kind"`
	Type             string `json:"type,omitempty"`
	ObjectGeneration int64  `json:"objectGeneration"`
	// AuthorityGeneration grows by one with every change of owner; with
	// the object generation it is the fencing token. Its JSON key is
	// "ownerGeneration", the name records in etcd have always had.
	AuthorityGeneration int64    `json:"ownerGeneration"`
	Owner               OwnerRef `json:"owner"`
	Node                NodeRef  `json:"node"`
	State               State    `json:"state"`
	Intent              *Intent  `json:"intent,omitempty"`
	// Group is the group this actor belongs to (a member record), if any.
	Group string `json:"group,omitempty"`
	// Members of a group record (actor names), if this is a group.
	Members []string `json:"members,omitempty"`
	// Pinned objects are never moved by the rebalancer.
	Pinned bool `json:"pinned,omitempty"`
	// LastRelocation is the id of the relocation that last wrote this record
	// (commit or preserve); it makes every planned record unique so an
	// uncertain write is recognised by reading back exactly its bytes.
	LastRelocation string `json:"lastRelocation,omitempty"`
	// Deleted is the object generation last deleted under this name (0:
	// none; docs/developing/lifecycle.md): a caller that knew it, or an
	// older one, is answered CODE_DELETED, never a silent fresh start.
	// Activate copies it from the catalog; every later write keeps it.
	Deleted int64 `json:"deletedObjectGeneration,omitempty"`
	// DeletedAtMs is when that delete was made (Unix ms, the deleter's
	// clock): an operation made before it was addressed to the deleted
	// object, and is refused (CODE_DELETED) instead of run on this one,
	// so a retry of a request the deleted object may have run never runs
	// again.
	DeletedAtMs int64 `json:"deletedAtUnixMs,omitempty"`
}

// Validate checks the fields a record must have.
func (r *Record) Validate() error {
	switch {
	case r.Kind != keyspace.KindActor && r.Kind != keyspace.KindGroup:
		return fmt.Errorf("%w: kind %q", ErrInvalidRecord, r.Kind)
	case r.ObjectGeneration <= 0 || r.AuthorityGeneration <= 0:
		return fmt.Errorf("%w: generations must be positive", ErrInvalidRecord)
	case r.Deleted < 0 || r.Deleted >= r.ObjectGeneration || r.DeletedAtMs < 0 || (r.Deleted == 0) != (r.DeletedAtMs == 0):
		return fmt.Errorf("%w: deleted generation %d (at %d ms) of an object of generation %d", ErrInvalidRecord, r.Deleted, r.DeletedAtMs, r.ObjectGeneration)
	case r.State == StateSleeping:
		return r.validateAsleep()
	case r.Owner.ID == "" || r.Owner.Generation <= 0:
		return fmt.Errorf("%w: owner %v", ErrInvalidRecord, r.Owner)
	case r.State != StateActive && r.State != StateRelocating:
		return fmt.Errorf("%w: state %q", ErrInvalidRecord, r.State)
	case r.State == StateRelocating && r.Intent == nil:
		return fmt.Errorf("%w: relocating without an intent", ErrInvalidRecord)
	}
	return nil
}

// validateAsleep checks a sleeping record: an actor outside any group that
// names no owner, no node and no intent.
func (r *Record) validateAsleep() error {
	switch {
	case !r.Owner.IsZero() || r.Node != (NodeRef{}):
		return fmt.Errorf("%w: a sleeping record names owner %v at %q", ErrInvalidRecord, r.Owner, r.Node.Address)
	case r.Intent != nil:
		return fmt.Errorf("%w: a sleeping record carries an intent", ErrInvalidRecord)
	case r.Kind != keyspace.KindActor || r.Group != "" || len(r.Members) > 0:
		return fmt.Errorf("%w: only an actor outside any group sleeps", ErrInvalidRecord)
	}
	return nil
}

// DecodeRecord parses and validates a stored record. Every location cache
// decodes every record change, so it decodes with goccy/go-json (about 7×
// encoding/json's speed on a record; FuzzDecodeRecordMatchesStd checks it
// accepts and decodes exactly what encoding/json does). Encode writes
// exactly encoding/json's bytes (encode.go).
func DecodeRecord(b []byte) (Record, error) {
	var r Record
	if err := gojson.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("%w: %v", ErrInvalidRecord, err)
	}
	if err := r.Validate(); err != nil {
		return Record{}, err
	}
	return r, nil
}

// Snapshot is a record as read from etcd at one revision.
type Snapshot struct {
	Object keyspace.Object
	Record Record
	// StoreVersion is the ModRevision of the authority key; every CAS compares it.
	StoreVersion int64
	// Revision is the etcd revision the snapshot was read at.
	Revision int64
}

// OwnerGeneration is AuthorityGeneration.
//
// Deprecated: the field is AuthorityGeneration (it was named
// OwnerGeneration, easily taken for the owner pair's generation).
func (r Record) OwnerGeneration() int64 { return r.AuthorityGeneration }

// Fence is the identity the snapshot's owner serves under: the owner pair and
// both generations.
type Fence struct {
	Owner               OwnerRef `json:"owner"`
	ObjectGeneration    int64    `json:"objectGeneration"`
	AuthorityGeneration int64    `json:"ownerGeneration"`
}

// Fence of the snapshot.
func (s Snapshot) Fence() Fence {
	return Fence{Owner: s.Record.Owner, ObjectGeneration: s.Record.ObjectGeneration, AuthorityGeneration: s.Record.AuthorityGeneration}
}

// Newer reports whether f is strictly newer than g for the same object:
// a larger object generation, or the same one with a larger owner generation.
func (f Fence) Newer(g Fence) bool {
	if f.ObjectGeneration != g.ObjectGeneration {
		return f.ObjectGeneration > g.ObjectGeneration
	}
	return f.AuthorityGeneration > g.AuthorityGeneration
}

// ErrInvalidRecord: a stored or planned record is malformed.
var ErrInvalidRecord = wire.Sentinel(pb.Code_CODE_INTERNAL, "authority: invalid record")

// OwnerKey is an owner key as seen in a multi-key read.
type OwnerKey struct {
	// Generation is the CreateRevision of owners/<id>; 0 when the key is absent.
	Generation int64
	// Value is the raw descriptor.
	Value []byte
}

// View is a set of records and owner keys read at one revision.
type View struct {
	Revision int64
	// Objects holds the records found, by object name; a missing object is absent.
	Objects map[string]Snapshot
	// Owners holds the requested owner keys, by owner id (Generation 0: absent).
	Owners map[string]OwnerKey
}

// Alive reports whether owner o has a live key of exactly its generation.
func (v View) Alive(o OwnerRef) bool {
	k, ok := v.Owners[o.ID]
	return ok && k.Generation != 0 && k.Generation == o.Generation
}

// Location is where an object is served, as a location cache keeps it:
// enough to route a call, judge a reply's fence, and see a commit. It is
// compact (a cache holds millions of them).
type Location struct {
	Owner               OwnerRef
	Node                NodeRef
	ObjectGeneration    int64
	AuthorityGeneration int64
	StoreVersion        int64
	Relocating          bool
}

// Fence of the location.
func (l Location) Fence() Fence {
	return Fence{Owner: l.Owner, ObjectGeneration: l.ObjectGeneration, AuthorityGeneration: l.AuthorityGeneration}
}

// LocationOf a snapshot.
func LocationOf(s Snapshot) Location {
	return Location{
		Owner: s.Record.Owner, Node: s.Record.Node,
		ObjectGeneration: s.Record.ObjectGeneration, AuthorityGeneration: s.Record.AuthorityGeneration,
		StoreVersion: s.StoreVersion, Relocating: s.Record.State == StateRelocating,
	}
}

// Asleep reports whether l is a sleeping object's location (it names no
// owner: a call goes where placement chooses, and wakes it there).
func (l Location) Asleep() bool { return l.Owner.IsZero() }

// OwnerGeneration is AuthorityGeneration.
//
// Deprecated: the field is AuthorityGeneration.
func (f Fence) OwnerGeneration() int64 { return f.AuthorityGeneration }

// OwnerGeneration is AuthorityGeneration.
//
// Deprecated: the field is AuthorityGeneration.
func (l Location) OwnerGeneration() int64 { return l.AuthorityGeneration }
