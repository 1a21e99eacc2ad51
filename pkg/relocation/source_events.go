package relocation

import (
	"github.com/meshloc/meshloc/pkg/record"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The source machine's events (its driver's I/O results) and actions.

// Source events (results of the source driver's I/O).
type (
	// IntentResult is the result of WriteIntent.
	IntentResult struct {
		Result WriteResult
		Err    error
	}
	// Captured: the object is sealed and its envelope encoded (Err: capture failed).
	//
	// The payload is Payload, or, when Segments is set, the concatenation of
	// Segments (a large state is streamed without being copied into one
	// buffer first).
	Captured struct {
		Payload  []byte
		Segments [][]byte
		Err      error
		// SealedUnixUs is when the seal happened (informational: it goes
		// in PREPARE for the target's interruption figure).
		SealedUnixUs int64
	}
	// Snapshotted is the result of Snapshot: the base's segments (Err: no
	// snapshot; the relocation goes on without pre-copy).
	Snapshotted struct {
		Segments [][]byte
		Err      error
	}
	// BoundarySent: DATA frames and CUTOVER were sent; Count requests.
	BoundarySent struct{ Count int }
	// SettleResult is the result of ReadSettle (all participants and the
	// source's owner key at one revision).
	SettleResult struct {
		View record.View
		Err  error
	}
	// Observed is the primary's record as the node's location cache now
	// holds it: only what etcd committed (its watch, and the results of the
	// node's own transactions and reads). The driver delivers every change
	// while the relocation runs; the machine decides what it means.
	Observed struct{ Location record.Location }
	// PreserveResult is the result of Preserve.
	PreserveResult struct {
		Result WriteResult
		Err    error
	}
)

func (IntentResult) event()   {}
func (Captured) event()       {}
func (Snapshotted) event()    {}
func (BoundarySent) event()   {}
func (SettleResult) event()   {}
func (Observed) event()       {}
func (PreserveResult) event() {}

// Source actions.
type (
	// WriteIntent writes the relocation intent on Seen (authority Intend,
	// guarded by Seen's store version and the source's owner key, with
	// relocations/<id> bound to the source's lease); result: IntentResult.
	WriteIntent struct {
		Seen   record.Snapshot
		Intent record.Intent
		// Members: the other participants (a group's members), written
		// relocating with the same intent in the same transaction.
		Members []record.Snapshot
	}
	// Seal stops dispatch to the object (the handler in progress finishes),
	// captures its state, timers, queue and de-duplication table, and encodes
	// the envelope; result: Captured. From now on new requests are kept,
	// in order. Participants are the records after the intent, the primary
	// first (a group's record has no state: its entry in the envelope
	// carries these generations).
	// Align, when not 0, pads the envelope so that the states start at a
	// multiple of it, and not before Start (EncodeEnvelopeAligned): a
	// pre-copy's chunk size, and where the base's states start.
	Seal struct {
		Participants []record.Snapshot
		Align        int
		Start        int
	}
	// Snapshot captures the state as Seal does, but while the object
	// serves (between two of its handlers; nothing is sealed, no request
	// is kept): a pre-copy's base. Result: Snapshotted. Room: the states
	// start at least this many bytes after the envelope's end, room for
	// the sealed envelope to be longer (a reply table that grew).
	Snapshot struct {
		Participants []record.Snapshot
		Align        int
		Room         int
	}
	// StreamChunks sends the payload as STATE chunks under the byte budgets.
	// The payload is the concatenation of Segments. Only, when not nil,
	// lists the chunks to send (a pre-copy's changed chunks); nil: all.
	StreamChunks struct {
		Segments [][]byte
		Manifest Manifest
		Only     []uint32
	}
	// SendBoundary sends every boundary request as DATA (in order), then
	// CUTOVER with their count and CRC32C; result: BoundarySent. From now on
	// new requests are held until the outcome.
	SendBoundary struct{}
	// ReadSettle reads every participant and the source's owner key at one
	// revision; result: SettleResult. The machine asks for one read at a
	// time: on entering SourceSettling, after a change it observed that is
	// not the commit, after a frame from the target, and every SettleEveryMs.
	ReadSettle struct{}
	// ReadyPassed: READY arrived, the point of no return (an Actor Join
	// answers its caller now).
	ReadyPassed struct{}
	// Admitted: the target admitted the object, as far as the source can
	// tell (its OK OUTCOME, or the commit seen first): where the
	// interruption ends as the source measures it. Once per relocation.
	Admitted struct{}
	// Preserve runs the preserve transaction on Seen (the primary), guarded
	// by its store version and the source's owner key; result: PreserveResult.
	Preserve struct {
		Seen record.Snapshot
		// Members: the other participants, preserved in the same transaction.
		Members []record.Snapshot
	}
	// Reopen puts the object back in service on the source: captured queue,
	// then boundary and held requests, in the order they were accepted; timers
	// resume; the fence is that of Record.
	Reopen struct {
		Record record.Snapshot
		// Members: every other participant's record after the preserve.
		Members map[string]record.Snapshot
	}
	// Drop discards the source's copy after the target committed. The first
	// DataApplied boundary requests get their replies by relay; the rest, and
	// every held request, are answered NotOwner with Committed's fence.
	Drop struct {
		Committed   record.Location
		DataApplied int
		// Members: every other participant's location after the commit, as
		// a settle read saw it, or as the commit wrote it (the commit moves
		// every participant at once, in one transaction).
		Members map[string]record.Location
	}
	// FailPending answers every pending request of the object (captured,
	// boundary, held) with Code and removes the object: it was lost.
	FailPending struct {
		Code    pb.Code
		Message string
	}
)

func (WriteIntent) action()  {}
func (Seal) action()         {}
func (Snapshot) action()     {}
func (StreamChunks) action() {}
func (SendBoundary) action() {}
func (ReadSettle) action()   {}
func (ReadyPassed) action()  {}
func (Admitted) action()     {}
func (Preserve) action()     {}
func (Reopen) action()       {}
func (Drop) action()         {}
func (FailPending) action()  {}
