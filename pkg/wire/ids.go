package wire

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// IDLen is the length of operation, relocation and routing ids in bytes.
const IDLen = 16

// OperationID identifies one request across retries: a UUIDv7 (128 bits,
// time-ordered, never zero).
type OperationID [IDLen]byte

// NewOperationID returns a fresh UUIDv7.
func NewOperationID() OperationID {
	u, err := uuid.NewV7()
	if err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return OperationID(u)
}

// ParseOperationIDBytes checks a wire operation id: 16 bytes, not zero, a UUIDv7.
func ParseOperationIDBytes(b []byte) (OperationID, error) {
	var id OperationID
	if len(b) != IDLen {
		return id, fmt.Errorf("%w: operation id has %d bytes, want %d", ErrInvalidOperationID, len(b), IDLen)
	}
	copy(id[:], b)
	if id.IsZero() {
		return id, fmt.Errorf("%w: operation id is zero", ErrInvalidOperationID)
	}
	if uuid.UUID(id).Version() != 7 {
		return id, fmt.Errorf("%w: operation id is not a UUIDv7", ErrInvalidOperationID)
	}
	return id, nil
}

// ParseOperationID parses the text form (a UUID string or 32 hex digits).
func ParseOperationID(s string) (OperationID, error) {
	u, err := uuid.Parse(s)
	if err != nil {
		return OperationID{}, fmt.Errorf("%w: %q: %v", ErrInvalidOperationID, s, err)
	}
	return ParseOperationIDBytes(u[:])
}

// IsZero reports whether id is all zero.
func (id OperationID) IsZero() bool { return id == OperationID{} }

// Time is when the id was made (its UUIDv7 millisecond timestamp).
func (id OperationID) Time() time.Time {
	sec, nsec := uuid.UUID(id).Time().UnixTime()
	return time.Unix(sec, nsec)
}

// String is the UUID text form.
func (id OperationID) String() string { return uuid.UUID(id).String() }

// RoutingID is a node's identity for one process start: 16 random bytes,
// compared as bytes, written as lowercase hex (never converted through a
// string for identity).
type RoutingID [IDLen]byte

// NewRoutingID returns 16 random bytes.
func NewRoutingID() RoutingID {
	var r RoutingID
	if _, err := rand.Read(r[:]); err != nil {
		panic(err)
	}
	return r
}

// Hex is the storage form.
func (r RoutingID) Hex() string { return hex.EncodeToString(r[:]) }

// String is Hex.
func (r RoutingID) String() string { return r.Hex() }

// Equal compares as bytes.
func (r RoutingID) Equal(b []byte) bool { return bytes.Equal(r[:], b) }

// IsZero reports whether r is all zero.
func (r RoutingID) IsZero() bool { return r == RoutingID{} }

// ParseRoutingIDHex parses the storage form.
func ParseRoutingIDHex(s string) (RoutingID, error) {
	var r RoutingID
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != IDLen {
		return r, fmt.Errorf("%w: routing id %q is not %d hex bytes", ErrInvalidID, s, IDLen)
	}
	copy(r[:], b)
	return r, nil
}

// ParseRoutingIDBytes checks a wire routing id.
func ParseRoutingIDBytes(b []byte) (RoutingID, error) {
	var r RoutingID
	if len(b) != IDLen {
		return r, fmt.Errorf("%w: routing id has %d bytes, want %d", ErrInvalidID, len(b), IDLen)
	}
	copy(r[:], b)
	if r.IsZero() {
		return r, fmt.Errorf("%w: routing id is zero", ErrInvalidID)
	}
	return r, nil
}

// RelocationID identifies one relocation attempt: 128 random bits, never zero.
type RelocationID [IDLen]byte

// NewRelocationID returns a fresh id (a UUIDv7, so ids sort by start time).
func NewRelocationID() RelocationID { return RelocationID(NewOperationID()) }

// String is the UUID text form (also the etcd key segment).
func (r RelocationID) String() string { return uuid.UUID(r).String() }

// ParseRelocationIDBytes checks a wire relocation id.
func ParseRelocationIDBytes(b []byte) (RelocationID, error) {
	var r RelocationID
	if len(b) != IDLen {
		return r, fmt.Errorf("%w: relocation id has %d bytes, want %d", ErrInvalidID, len(b), IDLen)
	}
	copy(r[:], b)
	if r == (RelocationID{}) {
		return r, fmt.Errorf("%w: relocation id is zero", ErrInvalidID)
	}
	return r, nil
}

// ParseRelocationID parses the text form (String's UUID).
func ParseRelocationID(s string) (RelocationID, error) {
	u, err := uuid.Parse(s)
	if err != nil {
		return RelocationID{}, fmt.Errorf("%w: relocation id %q: %v", ErrInvalidID, s, err)
	}
	return ParseRelocationIDBytes(u[:])
}

// NonceLen is the length of a relocation's nonce (Prepare.nonce).
const NonceLen = 16

// NewNonce returns a relocation's secret: NonceLen random bytes.
func NewNonce() []byte {
	b := make([]byte, NonceLen)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return b
}
