// Package failpoint injects faults at named points of meshloc's code: the
// steps of a relocation and of drain (docs/verification.md, "Faults"). It is
// compiled in only with the build tag `failpoints`; without it every call is
// an empty function the compiler removes.
//
// Points are enabled by name, in process (Enable) or for a whole process from
// the environment: MESHLOC_FAILPOINTS="source.after-seal=crash;target.before-commit=error@2".
// Actions:
//
//	error      Hit returns ErrInjected (the step fails as if its I/O failed)
//	crash      the process kills itself with SIGKILL at that point (kill -9)
//	pause      the goroutine blocks forever (a hung process; SIGKILL it)
//	sleep:D    sleep for the duration D (e.g. sleep:3s)
//	corrupt    Corrupt flips the lowest bit (XOR 0x01) of the last ASCII
//	           digit of a copy of the data passing the point (of its middle
//	           byte if it has none): a digit stays a digit, so the payload
//	           usually still decodes and only a checksum can tell; in a
//	           relocation payload that digit is in the object's state
//
// A suffix @N fires the action only at the N-th hit of the point (1-based);
// a suffix %N fires it at every N-th hit (hits N, 2N, 3N, …); without either
// every hit fires. Every firing is logged on stderr as
// "failpoint: <name> <action>" so a test can wait for it.
//
// # Planted bugs
//
// The same build tag compiles in switches that plant known bugs, so that the
// verification suite can prove its checkers catch them (docs/verification.md,
// "Planted bugs"). Planted(bug) reports whether a bug is planted; the code
// that the bug changes asks it only at the place where the correct code
// would act (refuse, compare, check), and the first time it answers true for
// a bug it logs "planted: <bug>" on stderr. Bugs are planted for a whole
// process from the environment, MESHLOC_PLANT="crc-ignored,no-generation-check"
// (read at init; unknown names are reported on stderr and ignored), or in
// process with Plant, which returns its undo. Without the build tag Planted is
// the constant false and Plant does nothing: a production binary cannot be
// planted.
package failpoint

import "errors"

// ErrInjected is returned by Hit for the action "error".
var ErrInjected = errors.New("failpoint: injected error")

// The named points.
const (
	SourceAfterSeal      = "source.after-seal"       // captured, nothing sent yet
	SourceChunk          = "source.chunk"            // before each STATE chunk (@k: chunk k)
	SourceChunkData      = "source.chunk-data"       // the bytes of each STATE chunk (corrupt@k)
	SourceAfterLastChunk = "source.after-last-chunk" // every chunk sent, before READY
	SourceBeforeCutover  = "source.before-cutover"   // READY received, before DATA and CUTOVER
	TargetBeforeReady    = "target.before-ready"     // restored, before READY is decided
	TargetBeforeCommit   = "target.before-commit"    // CUTOVER received, before the commit Txn
	TargetAfterCommit    = "target.after-commit"     // commit applied, its reply not yet read
	TargetBeforeReplay   = "target.before-replay"    // committed, before captured requests run
	TargetBeforeRelay    = "target.before-relay"     // before a reply relay is sent
	SessionBeforeSeal    = "session.before-seal"     // before a session's seal is sent before a move (error: never sent)
	SessionBeforeRoute   = "session.before-route"    // before a session's route is sent after a move (error: never sent)
	DrainStep            = "drain"                   // during drain, between objects
	// MessageAfterSend: a message of an outbox was delivered (its
	// destination answered); the answer is not yet back in the sender's
	// delivery. Action "error" loses the answer: the message goes again
	// with the same id; "sleep" holds it while the sender may move.
	MessageAfterSend = "message.after-send"
	// NodeBeforeReply: an owner executed a request and passed its last lease
	// check; the reply is about to leave the node (the verification plan's
	// R8, a pause between execute and reply). Hit on the RPC goroutine, after
	// the object's mailbox is free again: a sleep here holds only this reply.
	// Action "error" loses the reply: the request executed, the caller gets a
	// gRPC UNAVAILABLE error and retries with the same operation id.
	NodeBeforeReply = "node.before-reply"
	// StateBeforeWrite: a durable object's change is about to go to its
	// state store. Action "sleep" holds the write (past the owner's lease,
	// past a takeover: it must then be refused); "error" fails it unsent.
	StateBeforeWrite = "state.before-write"
	// StateBeforeClaim: a new owner is about to claim a durable object's
	// state (with the planted state-load-before-claim: between its read
	// and its claim). Action "sleep" widens that window.
	StateBeforeClaim = "state.before-claim"
)

// The planted bugs (Planted, Plant). Each names what the bug skips and, after
// the colon, the fault that exposes it.
const (
	// BugAckBeforeCommit: a relocation target runs the captured and DATA
	// requests and relays their replies before its commit transaction instead
	// of after it: target.before-commit=error (or a sleep past the deadline).
	BugAckBeforeCommit = "ack-before-commit"
	// BugNoGenerationCheck: owners serve callers that knew another object
	// generation (no StateLost, also not on recovery), and gateways and
	// clients accept replies with an older fence: kill -9 of an owner.
	BugNoGenerationCheck = "no-generation-check"
	// BugDedupNotTransferred: a relocation carries an empty de-duplication
	// table: a lost reply retried after the object moved (node.before-reply=error%20).
	BugDedupNotTransferred = "dedup-not-transferred"
	// BugCommitWithoutCompare: the commit transaction drops its
	// ModRevision compares (the target owner's key is still compared):
	// target.before-commit=sleep past the relocation deadline.
	BugCommitWithoutCompare = "commit-without-compare"
	// BugLeaseReceiveTime: the lease keeper counts the local deadline from
	// the arrival of a keep-alive reply, not from its send: etcd replies
	// delayed by more than the margin, then the node cut off from etcd.
	// (Owners start requests only while Valid, until deadline − Margin: new
	// requests run after etcd's expiry only if the delay exceeds 2·Margin,
	// which the default Margin TTL/5 and keep-alive timeout ≤ TTL/3 rule
	// out; timer fires and replies, allowed until the deadline, need only
	// more than Margin.)
	BugLeaseReceiveTime = "lease-receive-time"
	// BugCRCIgnored: a relocation target installs a payload whose CRC32C does
	// not match its PREPARE: source.chunk-data=corrupt%2.
	BugCRCIgnored = "crc-ignored"
	// BugWokenOwnerServes: a node whose lease deadline passed keeps its
	// objects and serves them under its old fences (no lease check before
	// executing or replying, no teardown, the process does not exit, and
	// it does not notice that etcd moved its objects away): SIGSTOP of an
	// owner past its TTL, then SIGCONT.
	BugWokenOwnerServes = "woken-owner-serves"
	// BugDeltaSkipsChunk: a pre-copy's source leaves one changed chunk out
	// of SEALED and does not send it: any write to the object during the
	// pre-copy. Caught by the protocol itself (the final payload's
	// CRC32C): the relocation is refused, the source keeps the object.
	BugDeltaSkipsChunk = "delta-skips-chunk"
	// BugOutboxNotTransferred: a relocation carries an empty outbox (the
	// messages its object sent that were not answered yet are dropped):
	// messages between objects that keep relocating (the transfers
	// workload).
	BugOutboxNotTransferred = "outbox-not-transferred"
	// BugRecycleEarly: a relocation target gives each STATE chunk's pooled
	// buffer back two chunks after it arrived instead of once the assembly
	// copied it: any state of several chunks. A chunk overwritten before it
	// was added fails its CRC32C; one held as it came (until half the
	// payload arrived) and overwritten after its check is caught only by a
	// check of the moved state.
	BugRecycleEarly = "recycle-early"
	// BugBulkCommitIgnoresCompare: the commit of one relocation of a bulk
	// move applies even when its own compare fails (the record changed
	// since its intent), as if the bulk's commits shared one outcome:
	// bulk moves in the storm, every 5th commit waiting past the
	// relocation deadline (target.before-commit=sleep:7s%5), so that its
	// source preserves the object first.
	BugBulkCommitIgnoresCompare = "bulk-commit-ignores-compare"
	// BugRecoveryBatchSharedCompare: locationd's recovery controller writes
	// a batch of recoveries in which each orphan's transaction after the
	// first leaves out the compare of its own record, as if the first
	// one's guarded the batch, so an orphan whose record changed after the
	// controller read it is recovered over the change: a record that
	// changes between the controller's read and its batch (an orphan
	// recovered meanwhile by a call).
	BugRecoveryBatchSharedCompare = "recovery-batch-shared-compare"
	// BugSleepBeforePersist: a durable object acknowledges its changes
	// before they are written (write-behind), and an idle object goes to
	// sleep — its record released — without waiting for them, so its
	// wake restores what etcd held before them: the lifecycle workload
	// (durable counters idle past the nodes' --sleep-after).
	BugSleepBeforePersist = "sleep-before-persist"
	// BugReminderFreshOp: a node sends a reminder firing again (its first
	// send timed out) under a fresh operation id instead of the firing's
	// own, so the object's de-duplication table cannot tell it ran: the
	// lifecycle workload's periodic reminders, while commits of the
	// storm wait 3 s (a firing captured by a move outlives its send).
	BugReminderFreshOp = "reminder-fresh-op"
	// BugStateWriteSkipsFence: a PostgreSQL state store's write compares
	// neither the row's fence nor its version, so a write held past a
	// takeover lands over the new owner's: writes held past the lease
	// (state.before-write=sleep) on an owner cut off from etcd, not from
	// PostgreSQL.
	BugStateWriteSkipsFence = "state-write-skips-fence"
	// BugStateLoadBeforeClaim: a new owner of a durable object in a
	// PostgreSQL state store reads its state before it raises the row's
	// fence, so a write of the previous owner that lands between is
	// neither loaded nor refused: the same trigger, and claims held
	// (state.before-claim=sleep).
	BugStateLoadBeforeClaim = "state-load-before-claim"
)

// Bugs lists every planted bug.
var Bugs = []string{
	BugAckBeforeCommit, BugNoGenerationCheck, BugDedupNotTransferred, BugCommitWithoutCompare,
	BugLeaseReceiveTime, BugCRCIgnored, BugWokenOwnerServes, BugDeltaSkipsChunk, BugOutboxNotTransferred,
	BugRecycleEarly, BugBulkCommitIgnoresCompare, BugRecoveryBatchSharedCompare, BugSleepBeforePersist,
	BugReminderFreshOp, BugStateWriteSkipsFence, BugStateLoadBeforeClaim,
}
