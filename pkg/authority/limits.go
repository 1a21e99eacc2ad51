package authority

import (
	"fmt"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// etcd's defaults for the bounds of one request (etcd flags --max-txn-ops
// and --max-request-bytes).
const (
	DefaultMaxTxnOps       = 128
	DefaultMaxRequestBytes = 1536 * 1024 // 1.5 MiB
)

// Limits are the etcd cluster's bounds on one transaction, which bound a
// group (docs/design.md §6): a group moves with one intent, one commit and
// perhaps one preserve transaction that each carry every participant.
// Set them to the cluster's --max-txn-ops and --max-request-bytes.
type Limits struct {
	// MaxTxnOps is etcd's --max-txn-ops: a transaction may have at most this
	// many compares, this many operations in Then and this many in Else.
	MaxTxnOps int
	// MaxRequestBytes is etcd's --max-request-bytes.
	MaxRequestBytes int
}

// DefaultLimits are etcd's defaults.
func DefaultLimits() Limits {
	return Limits{MaxTxnOps: DefaultMaxTxnOps, MaxRequestBytes: DefaultMaxRequestBytes}
}

func (l Limits) orDefault() Limits {
	if l.MaxTxnOps <= 0 {
		l.MaxTxnOps = DefaultMaxTxnOps
	}
	if l.MaxRequestBytes <= 0 {
		l.MaxRequestBytes = DefaultMaxRequestBytes
	}
	return l
}

// groupFixedOps is what the group transactions add to their per-participant
// operations. Per participant each has one compare (ModRevision), one put
// and one get; besides those:
//
//	intent    + compare owners/source, + put relocations/<id>,    + get owners/source
//	commit    + compare owners/target, + delete relocations/<id>, + get owners/target
//	preserve  + compare owners/source, + delete relocations/<id>, + get owners/source
//	settle    (a read)                  + get owners/source
//	recover   + compare owners/old (gone), owners/new (alive) and the
//	          recovery controller's election key (Guard)
//
// etcd counts compares, Then and Else separately against --max-txn-ops, so
// the largest part is the recovery's compares: participants + 3, where the
// participants of a group are the group record and its members.
const groupFixedOps = 3

// MaxGroupMembers is the largest number of members a group may have so that
// every transaction over the whole group fits in MaxTxnOps: MaxTxnOps − 4
// (124 with etcd's default of 128).
func (l Limits) MaxGroupMembers() int {
	l = l.orDefault()
	return max(l.MaxTxnOps-groupFixedOps-1, 0)
}

// requestOverhead bounds the protobuf framing of one operation of a
// transaction (tags, lengths, the compare's target and result fields).
const requestOverhead = 32

// TxnBytes estimates the size of the largest request a group's relocation
// makes with these records (the commit: for each participant a compare and
// a get of its key and a put of its key and planned value; plus the owner
// key and the relocation key). It errs on the large side.
func TxnBytes(keys keyspace.Keys, records []Snapshot) int {
	n := 2*(len(keys.Owner(""))+keyspace.MaxSegment) + len(keys.Relocation("01234567-89ab-cdef-0123-456789abcdef")) + 4*requestOverhead
	for _, r := range records {
		k := len(keys.Authority(r.Object))
		// The planned record adds an intent or a relocation id to what is stored.
		v := len(r.Record.Encode()) + 2*keyspace.MaxSegment + 200
		n += 3*k + v + 3*requestOverhead
	}
	return n
}

// ErrGroupTooLarge: a group would exceed what one etcd transaction carries
// (see GroupTooLargeError); nothing was written.
var ErrGroupTooLarge = wire.Sentinel(pb.Code_CODE_RESOURCE_EXHAUSTED, "authority: group too large for one etcd transaction")

// GroupTooLargeError says which bound a group would exceed and how to raise it.
type GroupTooLargeError struct {
	Group string
	// Members the group would have.
	Members int
	// Max is the largest allowed number of members (ops), or bytes.
	Max int
	// Bytes is the estimated request size, when the request size is the bound (else 0).
	Bytes  int
	Limits Limits
}

func (e *GroupTooLargeError) Error() string {
	if e.Bytes > 0 {
		return fmt.Sprintf("authority: %s with %d members: its relocation's transaction would be about %d bytes, over etcd's --max-request-bytes=%d "+
			"(a group moves in one etcd transaction); raise --max-request-bytes on every etcd member and on meshnode (--max-request-bytes), or use fewer members",
			e.Group, e.Members, e.Bytes, e.Limits.MaxRequestBytes)
	}
	return fmt.Sprintf("authority: %s would have %d members, at most %d fit: a group moves (and is recovered) in one etcd transaction of at most --max-txn-ops=%d operations "+
		"(each member takes one, the group record one, the owner keys and a guard three); raise --max-txn-ops on every etcd member and on meshnode (--max-txn-ops), or use fewer members",
		e.Group, e.Members, e.Max, e.Limits.MaxTxnOps)
}

// Is makes errors.Is(err, ErrGroupTooLarge) true.
func (e *GroupTooLargeError) Is(target error) bool { return target == ErrGroupTooLarge }

// WireCode is ErrGroupTooLarge's (wire.CodeOf).
func (e *GroupTooLargeError) WireCode() pb.Code { return pb.Code_CODE_RESOURCE_EXHAUSTED }

// CheckGroup checks that a group of members members (and, when records is
// not nil, of those records: the group's and each member's) fits one
// transaction; the error is a *GroupTooLargeError.
func (l Limits) CheckGroup(keys keyspace.Keys, group string, members int, records []Snapshot) error {
	l = l.orDefault()
	if max := l.MaxGroupMembers(); members > max {
		return &GroupTooLargeError{Group: group, Members: members, Max: max, Limits: l}
	}
	if records != nil {
		if b := TxnBytes(keys, records); b > l.MaxRequestBytes {
			return &GroupTooLargeError{Group: group, Members: members, Max: l.MaxRequestBytes, Bytes: b, Limits: l}
		}
	}
	return nil
}
