// Package relocation is meshloc's live relocation protocol (design.md §4) as
// two pure state machines: Source (the owner that moves an object) and Target
// (the node that receives it). Each takes events — peer frames, ticks, the
// results of I/O — through Step(Event) ([]Action, error) and returns actions
// for its driver (internal/relocator) to carry out. No I/O, no clock (time arrives
// in Tick as Unix ms), no goroutines, no context, no etcd: a test enforces the
// imports. The same inputs always give the same outputs, so transcripts in
// testdata/ are the specification.
//
// # Phases
//
//	SOURCE                                              TARGET
//	intent ──WriteIntent──► etcd (record relocating)
//	   │ IntentResult
//	capturing ──Seal──► mailbox sealed, state captured
//	   │ Captured
//	preparing ──PREPARE, STATE chunks──────────────────► new → assembling
//	   │                                                    │ all chunks, CRC32C ok
//	   │                                               restoring (hidden instance)
//	   │ ◄──────────────────────────────── READY ───────────┤ Restored, before the deadline
//	cutover ──DATA…, CUTOVER(count, crc)────────────────► ready
//	   │ BoundarySent                                       │ CUTOVER, or the fallback wait
//	settling ──ReadSettle, Observed (the watch)           committing ──Commit──► etcd
//	   │                                                    │ CommitResult committed
//	   │ ◄──────────────────────────────── OUTCOME ─────── Admit: captured + DATA first,
//	   │ committed → Drop (redirect the rest)                replies relayed, timers, open
//	   │ ours at the deadline → preserving ──Preserve──► etcd
//	   │        written → Reopen (queue back in order)     (the target's commit now fails → Discard)
//	   │ owner gone / other object generation → FailPending(Unavailable)
//	done                                                  done
//
// Any failure before READY (FAILED from the target, a broken stream, the
// deadline, a failed capture) goes to preserving, then Reopen: the source
// always preserves before it reopens, so a target whose READY was lost can
// never commit behind a source that serves again.
//
// Eager cutover (SourceConfig.EagerMaxBytes, Prepare.eager_cutover): a
// payload of one chunk goes with DATA and CUTOVER at once (capturing →
// cutover, no READY awaited); the target keeps them while it assembles and
// restores, checks them as after READY, and commits as soon as it
// restored. Sending CUTOVER is then the source's point of no return
// (invariant 1 holds with "CUTOVER sent" for "READY"); a FAILED from such
// a target before READY makes the source preserve at once.
//
// # Invariants (docs/design.md §9)
//
//  1. READY is the point of no return: after it the source reopens the object
//     only through a winning Preserve.
//  2. Exactly one of the target's Commit and the source's Preserve succeeds
//     (both compare the same store version in one etcd transaction), so at
//     every revision the object has one owner.
//  3. The target admits nothing before its commit succeeded; captured and DATA
//     requests run before any new request, in the order the source accepted
//     them.
//  4. Generations never decrease: the commit keeps the object generation and
//     adds one to the authority-owner generation; the settle read calls the
//     target committed only for the same object generation and a larger
//     owner generation held by another owner pair.
//  5. Every relocation ends (completed, aborted, failed or shutdown) by its
//     deadline plus the settle; Finish carries the first outcome.
//  6. Idempotency: a PREPARE repeated with the same bytes (same SHA-256
//     fingerprint of its deterministic encoding) gets the same answer; other
//     bytes under the same identity get a protocol error and change nothing;
//     duplicate chunks and DATA are ignored; frames after the end are ignored.
//     A gap in DATA aborts the stage (the stream is ordered).
//  7. A commit is valid only for its own intent (docs/design.md §3): the target
//     stages nothing unless every participant's record carries this
//     relocation's intent naming this target (Record.IntendedFor), its node
//     and PREPARE's deadline, owned by the coordinator at its node, with the
//     hash of PREPARE's nonce (a secret of the source's, never published);
//     the Commit action's transaction compares each record's exact bytes,
//     so what the target checked is what etcd holds, or nothing commits.
//  8. A target holds only what it was sent: the assembly keeps chunks as
//     they come until half the payload arrived (never allocating from the
//     announcement alone), a deadline further than TargetConfig
//     MaxDeadlineMs is refused, and the driver's bounds on stages
//     (PrepareEvent.Busy) are refused with CODE_RESOURCE_EXHAUSTED before
//     anything is staged.
//
// # The driver's duties, in order
//
// Source driver:
//  1. Open the stream to the target before Start, so the seal is not spent dialing.
//  2. Carry out actions in the order returned; an action that has a result
//     (WriteIntent, Seal, StreamChunks, SendBoundary, ReadSettle, Preserve)
//     delivers it as the named event; nothing else depends on it before
//     that. Everything else is an instruction without a result: Send,
//     ReadyPassed (READY arrived: an Actor Join answers its caller),
//     Admitted (the interruption, as the source sees it, ends now), Reopen,
//     Drop, FailPending, Finish.
//  3. Where a new request for the object goes follows from the actions
//     alone: served until Seal, kept (in arrival order) from Seal, held
//     from SendBoundary, served again from Reopen, redirected from Drop,
//     failed from FailPending.
//  4. Deliver a Tick when WakeAtMs says one is due (the machine reads the
//     time only from Ticks: settling's reads and waits, the deadline), and
//     one with the current time before other events; every received frame
//     (a stream error is StreamBroken); and every change of the primary's
//     record the node's location cache shows (Observed; only committed etcd
//     data). A Tick before WakeAtMs changes nothing (the property test
//     checks it), so extra Ticks are harmless.
//  5. ReadSettle: read all participants and the source's owner key at one
//     revision and deliver SettleResult; the machine asks for one read at a
//     time, and decides when.
//  6. On Reopen, put captured, boundary and held requests back in that order;
//     on Drop, wait for relayed replies of captured and the first DataApplied
//     boundary requests and redirect the rest; on FailPending, answer all.
//
// Target driver:
//  1. Before PREPARE reaches the machine, know whether the node is draining
//     (PrepareEvent.Draining), the time, whether a bound on incoming stages
//     is reached or the relocation is staged already on another stream
//     (PrepareEvent.Busy, Duplicate), and, with mutual TLS, which node the
//     stream's certificate names (PrepareEvent.Peer).
//  2. Restore creates hidden instances that admit nothing; requests arriving
//     for them wait.
//  3. ReadGroup reads an Actor Join's group; Commit is the commit transaction
//     of pkg/authority; an RPC error is delivered as CommitResult{Err} (or
//     GroupRead{Err}), and the machine asks again RetryPauseMs later
//     (ResolveCommit, a read-back; or ReadGroup): at WakeAtMs. A Tick also
//     carries whether the node drains, so deliver one now and then even
//     when none is due (the driver's is at most every 100 ms).
//  4. Admit: captured requests then Data at the head of the mailbox, each
//     reply relayed to its requester (acknowledged; a duplicate relay is
//     answered already-terminal), then waiting requests; timers resume;
//     admission opens. Keep a bounded tombstone of the relocation id so late
//     frames are ignored and counted.
//
// # Groups and Actor Join
//
// A group moves as one relocation (groups.go): the group record is the
// primary participant (SourceConfig.Object) and its members follow
// (SourceConfig.Members); WriteIntent, Preserve, the settle read and the
// target's Commit cover every participant, each in one transaction, and
// Reopen and Drop carry every member's record. An Actor Join
// (SourceConfig.JoinGroup) moves one actor to the node that owns the group
// it joins; the target's Commit names the group and writes the membership
// in the same transaction. Before staging anything the target refuses a
// participant set that is not one whole group, one joining actor, or one
// actor outside any group (a member never moves alone). Transcripts:
// group_*.txt, join_*.txt.
//
// Not here: choosing the target, budgets for chunk bytes, the gRPC stream,
// the watch: all in the driver.
package relocation
