// Package relocator drives relocations: it runs the pure machines of
// pkg/relocation (Source, Target) and carries out their actions, deciding
// nothing itself. Everything a relocation touches goes through narrow seams:
//
//   - Store: the etcd transactions and reads (*authority.Store fits);
//   - Peer: the relocation stream, ordered frames both ways (gRPC in a node,
//     an in-memory pipe in tests: Pipe);
//   - SourceMailbox / TargetMailbox: the objects moved — seal, capture,
//     hand over the boundary, reopen, drop, fail; restore hidden, admit,
//     discard — implemented by the node's hosted objects, which own their
//     queues;
//   - Watch: the node's location cache, whose changes of the primary's
//     record reach the source machine as Observed events;
//   - Reporter: what happened, for status, metrics and logs;
//   - clock.Clock: the one clock (ticks, timestamps).
//
// One run loop (loop.go) serves both sides: it feeds the machine events —
// frames from the Peer, ticks, the results of its actions, the cache's
// changes, a stop — and executes the actions the machine returns, in order.
// An action with a result delivers it as the next event; a settle read runs
// in a goroutine of the loop's own, so frames keep flowing meanwhile. Every
// goroutine a run starts ends before Run returns, but a target's receive
// goroutine, which the gRPC handler's return ends.
//
// What the driver must not do: choose a target, judge a record, decide an
// outcome, sleep, or poll. Faults of the test builds wrap the seams
// (pkg/node's failpoints), never branch in here.
package relocator
