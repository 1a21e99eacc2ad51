package authority

import (
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The record types live in pkg/record (pure, no etcd); these aliases keep
// authority.Record etc. for callers of this package.
type (
	State    = record.State
	OwnerRef = record.OwnerRef
	NodeRef  = record.NodeRef
	Intent   = record.Intent
	Record   = record.Record
	Snapshot = record.Snapshot
	Fence    = record.Fence
	OwnerKey = record.OwnerKey
	View     = record.View
)

// Record states.
const (
	StateActive     = record.StateActive
	StateRelocating = record.StateRelocating
	StateSleeping   = record.StateSleeping
)

// DecodeRecord parses and validates a stored record.
func DecodeRecord(b []byte) (Record, error) { return record.DecodeRecord(b) }

// Errors of this package.
var (
	// ErrInvalidRecord: a stored or planned record is malformed.
	ErrInvalidRecord = record.ErrInvalidRecord
	// ErrNotIntended: a commit's expected record does not carry the intent
	// of its relocation naming its target; nothing was written.
	ErrNotIntended = record.ErrNotIntended
	// ErrInvalidRequest: a request to this package is malformed; nothing was written.
	ErrInvalidRequest = wire.Sentinel(pb.Code_CODE_INVALID_ARGUMENT, "authority: invalid request")
	// ErrNotFound: the object has no authority record.
	ErrNotFound = wire.Sentinel(pb.Code_CODE_NOT_FOUND, "authority: object not found")
	// ErrOwnerNotAlive: the owner a write depends on has no live key with the
	// expected generation; nothing was written.
	ErrOwnerNotAlive = wire.Sentinel(pb.Code_CODE_UNAVAILABLE, "authority: owner not alive")
	// ErrUncertain: etcd did not answer and the read-back could not decide yet;
	// the write may or may not have happened. Retry the resolution.
	ErrUncertain = wire.Sentinel(pb.Code_CODE_UNAVAILABLE, "authority: outcome uncertain")
	// ErrNoSpace: etcd refused the write for want of space — it reached
	// its quota and raised its NOSPACE alarm — and the read-back found it
	// not written. Every write fails alike until the alarm is disarmed
	// (docs/operating/etcd.md): retrying does not help (nospace.go).
	// ErrCorruptRecord: etcd holds a record of the object that does not
	// decode. Nothing is served for the object (an owner that sees it
	// fences the object) until an operator repairs or deletes the record.
	ErrCorruptRecord = wire.Sentinel(pb.Code_CODE_CORRUPT_RECORD, "authority: corrupt record")
	ErrNoSpace       = wire.Sentinel(pb.Code_CODE_RESOURCE_EXHAUSTED, "authority: etcd is out of space (NOSPACE alarm)")
)
