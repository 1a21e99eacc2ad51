// Package node is a meshnode: an owner that hosts objects and a gateway
// that routes calls to their owners. It composes the pieces that decide
// (pkg/relocation's machines, pkg/lease, pkg/placement) with the I/O that
// carries their decisions out, and owns what is a node's own:
//
//   - lifecycle (node.go): start, serve, stop, fenced; its settings are
//     pkg/node/config;
//   - calls (route.go, routes.go): pkg/node/routing decides where a call
//     goes; the node serves it here, forwards it, relays replies;
//   - hosted objects: internal/hosted owns each one (mailbox, instance,
//     timers, de-duplication table, outbox, sessions, durable writes, the
//     relocation actions on its queues); the node activates them
//     (activate.go), keeps their table and gives them what they ask of it
//     (hosting.go); the target's mailbox (mailbox_target.go) registers
//     restored objects;
//   - relocations (source.go, target.go, targets.go): the one way a source
//     relocation starts, the target stage's admission, the target rule
//     (placement.Eligible), each run by internal/relocator;
//   - groups and Actor Join (groups.go, join.go), ownership noticed from
//     etcd (ownership.go, activate.go);
//   - drain: pkg/node/drain decides what moves where and when; the node
//     carries its moves out (drain.go, drain_host.go);
//   - messages between objects: recorded, delivered and answered in
//     internal/hosted (docs/design.md §13); the node sends them like calls
//     and checks their senders (hosting.go), and keeps the traffic sketch
//     for co-location (traffic.go, AdminService.Traffic).
//
// Capabilities with a seam of their own live in packages under it:
// internal/hosted (the hosted objects), config (settings and flags), peers
// (connections to live owners, the forward and relocation streams),
// routing (where a call goes, fences seen), pacing (background relocations
// yield to calls), drain, gateway (sessions at their gateway), stages
// (bounds on relocation streams, tombstones), durable (a durable object's
// persisted form), reloclog (relocation statuses, Actor Join profiles, the
// event stream), execlog (the execution log), nodemetrics (its metrics),
// faults (test builds only: the relocation seams' faults).
//
// What it must not do: decide a relocation's outcome (the machines do),
// keep a fault or planted bug in a production build (they wrap its seams
// in faults_on.go and faults, compiled only with -tags failpoints), read the time but
// through its clock (Options.Clock), or start a goroutine nobody waits for.
package node
