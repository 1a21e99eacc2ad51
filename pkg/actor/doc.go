// Package actor is the Go API for object types: what a developer who embeds
// meshloc writes to host their own stateful objects, and the pieces of an
// object's state the runtime carries with it (timers, the reply table).
//
// A Type names a kind of object (the <type> of actor/<type>/<id>) and makes
// fresh instances; a Registry holds the types a node hosts. An instance is
// an Object: Handle runs requests, Snapshot and Restore move its state, and
// OnTimer (TimerObject) receives timer ticks. package builtin has the types
// of docs/design.md §10 as examples.
//
// # The rules a type must follow
//
//  1. One request at a time, in arrival order. The runtime calls Handle,
//     OnTimer, Snapshot and Restore of one instance from one mailbox,
//     never concurrently; a type needs no locks.
//  2. Handlers are deterministic given the state and the arguments. A
//     reply is recorded with the operation id in the object's ReplyTable and
//     a retry is answered from it; a request queued when the object moves is
//     executed on the target. Both are only meaningful if running a request
//     means the same thing wherever and whenever it runs: no reading of the
//     local clock (use Context.Now), of random numbers, of environment or of
//     other objects from inside a handler.
//  3. The state round-trips: Restore(Snapshot()) on a fresh instance gives
//     an instance that answers every request the same way. Snapshot is
//     called at relocation, drain and, for durable types, after every
//     acknowledged change. Restore refuses bytes it did not write with an
//     error wrapping ErrCorruptState.
//  4. Errors are answers. ErrUnknownMethod, ErrInvalidArgument and
//     ErrRejected (use the helpers UnknownMethod, InvalidArgument, Rejected)
//     are terminal and recorded like a reply: a retry gets the same error,
//     and a refused request must leave the state unchanged. CodeOf maps
//     errors to wire codes.
//  5. Timers belong to the object. Context.SetTimer and CancelTimer change
//     the object's Timers, which travel with its state: after a move the
//     ticks resume with the next delivery index, none lost or repeated.
//     What happens to ticks that came due while the object was moving or
//     the node was slow is the timer's OverrunPolicy (Skip, FireOnce,
//     CatchUp). Tick.Index lets a type notice or de-duplicate ticks.
//  6. Side effects outside the object are stamped with Context.Fence, the
//     identity the instance is served under; their receiver refuses an
//     older fence, so an instance that lost its ownership (and does not know
//     it yet) cannot act after its successor.
//  7. Other objects are reached by message, never called: Context.Send
//     (and Ask, whose answer comes back to OnReply: ReplyObject) records a
//     message in the object's Outbox as part of the turn's effect — a
//     turn that returns an error sends nothing — and the runtime delivers
//     it after the turn, exactly once, in order per destination
//     (docs/design.md §13). A message's operation id is derived from the
//     turn's (MessageID), so a turn that runs again sends the same ids.
//
// # The state the runtime carries
//
// Besides the type's own snapshot, an object carries its Timers, its
// ReplyTable and its Outbox, each with a canonical, versioned binary
// encoding (Timers.Encode, ReplyTable.Encode, Outbox.Encode) whose decoders
// check every bound and refuse with ErrCorruptState. They are plain data
// with explicit now arguments and no goroutines, like the relocation state
// machine:
//
//   - Timers.FireDue(now) returns the ticks due and advances the timers; the
//     runtime delivers them (OnTimer) in the same mailbox turn, so a snapshot
//     never falls between the two, then sleeps until Timers.Next.
//   - ReplyTable.Check before running a request: a recorded reply, or
//     permission to run, or ErrOperationExpired for an operation id too old to
//     tell (its UUIDv7 time is outside the window, or not after the newest
//     id evicted). Record after running it. An evicted id is refused, never
//     executed again, so exactly-once holds with a bounded table (design.md §5).
//   - Delivery decides how an Outbox is delivered (what to send now, what an
//     answer means — OutcomeOf, the one table —, when to retry, when to give
//     up); the runtime sends and tells it what came back. It holds no state
//     that travels: after a move the outbox is sent again from the first
//     message, and the destinations' reply tables answer what ran already.
//
// # What this package is not
//
// It has no network, no etcd, no goroutines and no clock: it does not route,
// place, relocate or persist objects, and does not enforce the rules above
// (a type that breaks them gets duplicated or divergent effects, not an
// error). The runtime in pkg/node does the I/O; the fence comparisons
// are made by whoever receives a fenced message.
package actor
