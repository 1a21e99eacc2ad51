// Package node is a meshnode: an owner that hosts objects and a gateway
// that routes calls to their owners. It composes the pieces that decide
// (pkg/relocation's machines, pkg/lease, pkg/placement) with the I/O that
// carries their decisions out, and owns what is a node's own:
//
//   - lifecycle (node.go): start, serve, stop, fenced; its settings are
//     pkg/node/config;
//   - calls (route.go, routes.go): pkg/node/routing decides where a call
//     goes; the node serves it here, forwards it, relays replies;
//   - hosted objects (host.go, mailbox*.go): one mailbox per object, its
//     activation, timers and de-duplication table, and the relocation
//     actions on its queues (seal, capture, hold, reopen, drop, fail;
//     restore, admit, discard) — the relocator's Mailbox seam;
//   - relocations (source.go, target.go, targets.go): the one way a source
//     relocation starts, the target stage's admission, the target rule
//     (placement.Eligible), each run by internal/relocator;
//   - groups and Actor Join (groups.go, join.go), durable state
//     (durable.go), ownership noticed from etcd (ownership.go,
//     recovered.go);
//   - drain: pkg/node/drain decides what moves where and when; the node
//     carries its moves out (drain.go, drain_host.go);
//   - messages between objects (messages.go, message_delivery.go): the
//     outbox recorded in the sender's turn, its delivery as pkg/actor's
//     Delivery decides it, answers applied in the sender's mailbox
//     (docs/design.md §13); the traffic sketch and AdminService.Traffic
//     (traffic.go) for co-location.
//
// Capabilities with a seam of their own live in packages under it:
// config (settings and flags), peers (connections to live owners and the
// forward stream), routing (where a call goes, fences seen), pacing (background relocations yield to calls), drain,
// gateway (sessions at their gateway), stages (bounds on relocation
// streams, tombstones), durable (a durable object's persisted form),
// reloclog (relocation statuses and the event stream), execlog (the
// execution log).
//
// What it must not do: decide a relocation's outcome (the machines do),
// keep a fault or planted bug in a production build (they wrap its seams
// in faults_on.go, compiled only with -tags failpoints), read the time but
// through its clock (Options.Clock), or start a goroutine nobody waits for.
package node
