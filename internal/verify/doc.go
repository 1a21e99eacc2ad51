// Package verify is meshloc's verification suite (docs/verification.md,
// issue #5): checked workloads over a running cluster, a relocation storm,
// fault hooks, an etcd watch audit of the authority records, checkers, and
// the figures report every verification run prints.
//
// The pieces:
//
//   - History records every operation of every client stream: call and return
//     on a monotonic clock (nanoseconds since the run started), the outcome
//     (ok, fail = definitely without effect, unknown = may or may not have
//     happened; an unknown operation returns at math.MaxInt64 for porcupine),
//     and the fence the reply was served under.
//   - Workloads (Bank, Register, List, Counter) generate load through a
//     Caller (a *client.Client) with unique written values, and check the
//     history against the final state read after the cluster healed. Register
//     is checked with porcupine per object; a committed relocation is itself
//     an operation of that model, so a reply from a superseded owner is
//     illegal.
//   - A memory object whose owner crashed loses its state by design: the
//     next call is answered CODE_STATE_LOST with a larger object generation.
//     Writes acknowledged under a generation that was declared lost that way
//     count as "declared lost"; any other missing write is a silent loss and
//     fails the run. A durable object (Bank.Type "dbank", List.Type "dlist")
//     keeps its state across the crash of its owner and declares nothing:
//     every acknowledged write must be in its final read.
//   - Relocator moves random objects continuously (any target, a named one,
//     back where they came from, to the same target twice, two at once).
//   - Audit watches the etcd key space from the run's start revision and
//     replays every change of every authority record (it needs the history
//     its watch has not delivered yet: a compaction past it ends the audit
//     with an error):
//     generations never decrease, a commit moves the authority generation by
//     exactly one to a live owner named by the record's intent, a recovery
//     gives a larger object generation and only when the old owner is gone,
//     and one fence (object, object generation, authority generation) is
//     never granted to two owners. The replies of the history and the nodes'
//     execution logs (ExecLogSource, optional) are cross-checked against it.
//   - Execution logs: a meshnode started with --exec-log PATH appends one
//     JSON line per executed request or timer tick (owner, owner generation,
//     object, object and authority generations, op or timer, t), written
//     before the reply leaves. ReadExecLogFiles (or ExecLogFiles as the
//     ExecLogSource) aggregates them per owner and fence; CheckExecLogs finds
//     fences executed by two owners and operations executed twice, allowing
//     only a retry run again on an object re-created after its generation
//     was declared lost (ExecCheck.ReexecutedAfterLoss).
//   - Run drives all of it for a duration against a Cluster, heals, reads
//     every object (liveness), checks, and returns a Report (text and JSON).
package verify
