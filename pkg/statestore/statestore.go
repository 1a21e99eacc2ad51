// Package statestore owns where durable objects' state lives: the Store
// interface a durable object's node writes and reads through, the etcd
// store (the default: the state beside the authority record, fenced in the
// same transaction), and the rule a store beside etcd follows to be as safe
// (docs/design.md §5b): every row carries the fence of the owner that
// wrote it, a new owner raises it before it loads, and every write is
// conditional on it. Backends live in sub-packages (postgres); every one
// passes the conformance suite in statestoretest.
package statestore

import (
	"context"
	"errors"
	"fmt"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Store is where a node persists and restores its durable objects.
//
// The authority record stays in etcd whatever the store: who owns an
// object is decided there, by one transaction per change of owner. A Store
// only keeps what the owner persisted, and refuses a writer that a newer
// owner has fenced out.
type Store interface {
	// Name is the store's kind, "etcd" or "postgres" (logs, metrics).
	Name() string
	// MaxBytes is the largest change (state, reply and schedule) the
	// store takes in one write.
	MaxBytes() int
	// Size is what req writes in this store, in bytes (against MaxBytes).
	Size(req authority.PersistRequest) int
	// Load makes the claimer the one writer of the object's state and
	// reads what was persisted (c.Fresh: only its version). It is called
	// by every new owner (first activation, commit, recovery, wake) before
	// it serves or writes. A store whose writes are not in the record's
	// transaction raises the object's fence to c.Fence first: a writer
	// with an older fence can write no more. ErrFenced: a newer owner
	// already claimed it; the claimer is not the owner any more.
	Load(ctx context.Context, c Claim) (authority.StateRead, error)
	// Persist writes one acknowledged change (the state, its reply, the
	// replies it evicts, its schedule changes) if the writer is still the
	// one: see authority.PersistRequest and PersistOutcome.
	Persist(ctx context.Context, req authority.PersistRequest) (authority.PersistResult, error)
	// Forget removes an object's state and replies after its record was
	// deleted (the etcd store removed them in the delete's transaction:
	// nothing to do). Idempotent; the next incarnation's Load ignores
	// state written under a deleted generation even if Forget never ran.
	Forget(ctx context.Context, obj keyspace.Object, deleted int64) error
	// Close releases the store's connections.
	Close() error
}

// WithRecord is a store a new owner can read in the very transaction
// that makes it the owner (the etcd store: its state changes only in
// transactions the record fences, so a read made with the owner's own
// record write is what Load would read after it). The node asks that
// transaction to read the state (authority's ActivateRequest and
// WakeRequest ReadState) and loads from its answer: one round trip less
// per activation and wake.
type WithRecord interface {
	// LoadFrom is Load's answer for c, given rd: the state read in the
	// transaction that wrote the record c's fence comes from.
	LoadFrom(c Claim, rd authority.StateRead) (authority.StateRead, error)
}

// Claim is a new owner's Load.
type Claim struct {
	Object keyspace.Object
	// Fence is the one the claimer serves under, from the record its
	// activation wrote.
	Fence authority.Fence
	// Deleted is the record's deleted generation (Record.Deleted): a
	// state written under it or an older object generation belongs to a
	// deleted object and is never restored.
	Deleted int64
	// Fresh: the object was just created (no record before): what is
	// stored is not restored; StateRead.StateVersion says what the first
	// write replaces.
	Fresh bool
}

// Validate checks a claim's fields.
func (c Claim) Validate() error {
	switch {
	case c.Object.Validate() != nil:
		return fmt.Errorf("%w: %w", ErrInvalidRequest, c.Object.Validate())
	case keyspace.ValidateOwnerID(c.Fence.Owner.ID) != nil || c.Fence.Owner.Generation <= 0:
		return fmt.Errorf("%w: claim by owner %v", ErrInvalidRequest, c.Fence.Owner)
	case c.Fence.ObjectGeneration <= 0 || c.Fence.AuthorityGeneration <= 0:
		return fmt.Errorf("%w: claim under generations o%d/a%d", ErrInvalidRequest, c.Fence.ObjectGeneration, c.Fence.AuthorityGeneration)
	case c.Deleted < 0 || c.Deleted >= c.Fence.ObjectGeneration:
		return fmt.Errorf("%w: claim of generation %d with deleted generation %d", ErrInvalidRequest, c.Fence.ObjectGeneration, c.Deleted)
	}
	return nil
}

// ErrFenced: a newer owner claimed the object's state; the claimer must not
// serve it.
var ErrFenced = wire.Sentinel(pb.Code_CODE_UNAVAILABLE, "statestore: a newer owner holds the state")

// ErrInvalidRequest: a request's fields are malformed; nothing changed.
var ErrInvalidRequest = authority.ErrInvalidRequest

// ErrTooLarge: a write over the store's MaxBytes; nothing changed.
var ErrTooLarge = wire.Sentinel(pb.Code_CODE_STATE_TOO_LARGE, "statestore: change too large")

// IsFenced reports whether err is ErrFenced.
func IsFenced(err error) bool { return errors.Is(err, ErrFenced) }

// Opener opens a store for a node at its Start, given the node's authority
// store (a store beside etcd still keeps the reminder schedule there).
type Opener func(ctx context.Context, auth *authority.Store) (Store, error)
