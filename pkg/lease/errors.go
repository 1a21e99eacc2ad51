package lease

import (
	"errors"
	"fmt"
)

// ErrDuplicateOwner is returned by Start when owners/<ownerId> already exists
// (another live process holds the id, or a crashed predecessor's lease has not
// expired yet) and did not disappear within Config.AcquireWait. The concrete
// error is a *DuplicateOwnerError.
var ErrDuplicateOwner = errors.New("lease: owner id already held by a live process")

// ErrLeaseLost is the cause when etcd said the lease or the owner key is gone:
// a keep-alive answered "lease not found" (revoked, or expired server-side), or
// an Update found the key deleted or re-created by another generation. Terminal.
var ErrLeaseLost = errors.New("lease: lease lost")

// ErrLeaseExpired is the cause when the conservative local deadline passed
// without a keep-alive confirmed in time (partition, slow or unavailable etcd).
// The lease may still be alive in etcd for a little while; the keeper has
// stopped using it anyway. Terminal.
var ErrLeaseExpired = errors.New("lease: lease expired")

// ErrClosed is the cause after Close, and the error of Update on a closed
// keeper. Terminal.
var ErrClosed = errors.New("lease: keeper closed")

// ErrInvalidConfig is returned by Config.Validate and Start for a bad field or
// a bad relation between fields; the concrete error is a *ConfigError naming
// the field.
var ErrInvalidConfig = errors.New("lease: invalid config")

// ErrUpdateConflict is returned by Update when the descriptor kept changing
// under it (another writer moved the key's ModRevision on every attempt).
// Nothing was written; the keeper is still valid.
var ErrUpdateConflict = errors.New("lease: owner descriptor changed concurrently")

// ErrInvalidDescriptor is returned by DecodeDescriptor for a value of
// owners/<ownerId> that is not a descriptor: not one JSON object of its
// fields, or one that names no valid owner id. Readers treat such an owner
// as one whose descriptor is unknown (only its key's owner id).
var ErrInvalidDescriptor = errors.New("lease: invalid descriptor")

// DuplicateOwnerError is the ErrDuplicateOwner returned by Start: the owner
// key that is in the way, as read in the refused transaction.
type DuplicateOwnerError struct {
	OwnerID string
	// Generation is the CreateRevision of the existing owners/<ownerId>.
	Generation int64
	// Descriptor is the existing value (only OwnerID set if undecodable).
	Descriptor Descriptor
}

func (e *DuplicateOwnerError) Error() string {
	return fmt.Sprintf("%s: owner %s generation %d (address %q)", ErrDuplicateOwner, e.OwnerID, e.Generation, e.Descriptor.Address)
}

// Is makes errors.Is(err, ErrDuplicateOwner) true.
func (e *DuplicateOwnerError) Is(target error) bool { return target == ErrDuplicateOwner }

// ConfigError is the ErrInvalidConfig returned by Validate: which field, and why.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("%s: %s: %s", ErrInvalidConfig, e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidConfig) true.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }
