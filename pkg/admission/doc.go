// Package admission decides how fast a node starts background work — the
// relocations nobody waits on at once: a rebalance, an operator's move, a
// storm of them — so that the calls the node serves keep their latency.
//
// It is pure: the node samples its process on a tick (how long runnable
// goroutines waited for a processor, the calls it served, the background
// work it started) and steps a Governor with what it saw; the Governor
// answers the rate at which background work may start, and a Pacer spaces
// the starts at that rate. Nothing here reads a clock, sleeps or starts a
// goroutine: times come in as arguments.
//
// # The rule
//
// Work is counted in units: a relocation is one unit, and one more per MiB
// of the state it moves (a 64 MiB state costs 65). Per sample (Governor.Step):
//
//   - no call was served: Open, no limit. There is nothing to protect, and
//     relocations alone run as fast as the node can move them.
//   - calls were served and the run-queue wait p99 was above the target:
//     Slowed, to what started in the interval (or the limit, if lower) times
//     target/p99, that factor kept within [0.1, 0.5], never below MinRate.
//   - calls were served and the wait was within the target: a Slowed limit
//     grows by a tenth plus a tenth of MinRate, and opens above MaxRate.
//
// A foreground relocation (a drain's, an Actor Join's, one its caller asks
// to be) is never paced; it is not counted either.
//
// # Why the run-queue wait
//
// On a node whose processors are busy, a call waits for one at each of its
// hand-offs (the connection's reader, the handler, the object's turn, the
// reply's writer); background work is what can wait instead. The Go runtime
// measures that wait for the whole process (the /sched/latencies:seconds
// histogram), whatever holds the processors: the node's relocations, an
// embedded etcd, the program that embeds the node. CockroachDB's elastic
// admission control slows its background work on the same signal.
//
// # What it does not do
//
// It never delays foreground work, never stops work that started, and never
// refuses background work for ever: MinRate units start every second
// whatever the latency. It does not measure CPU per relocation: units are
// the proxy (a relocation's CPU grows with its state's bytes).
package admission
