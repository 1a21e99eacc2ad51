// Package locationd is the server logic of the locationd binary (docs/design.md
// §8): it runs an embedded etcd (or uses an existing cluster), and serves the
// location API over HTTP — who the live owners are, who owns which object, and
// which objects lost their owner — with /healthz, /readyz and /metrics; and it
// asks nodes to relocate objects, lists their relocations, and drains a node
// (POST /v1/owners/{id}/drain, drain.go).
//
// It runs the recovery controller (package recovery: an etcd election among
// every locationd; the leader reports orphaned objects and, with
// --recover-orphans, re-activates them; GET /v1/controllers) and the
// rebalancer (package internal/rebalance plans; GET /v1/rebalance/plan shows
// the plan, POST /v1/rebalance runs it through the owners, like POST
// /v1/relocations, RebalanceConcurrency moves at a time, each checked against
// etcd again first).
//
// It follows the etcd it uses (etcd.go): etcd's alarms (a NOSPACE alarm
// fails /readyz: etcd refuses every write), each member's size against its
// quota, and its compaction — the embedded etcd compacts and defragments
// itself (internal/embedetcd); an external etcd that does not compact is
// warned about (etcd_compaction.go). GET /v1/etcd and meshloc_etcd_* say it.
//
// It serves the dashboard at / (dashboard.go: embedded files) and the event
// stream GET /v1/events (events.go: the hub, its ring and its clients;
// events_sources.go: the etcd watch and the nodes' WatchEvents streams,
// run only while a client is connected; events_http.go: the SSE handler).
//
// What it is not: a writer of ownership. The only keys it writes are its
// election keys (lease-bound, under controllers/); every ownership write —
// the recovery controller's too — goes through pkg/authority and its fenced
// transactions, and relocations are made by the nodes.
//
// # Relocations
//
// POST /v1/relocations reads the object's record and its owner's key at one
// revision, refuses an owner that is not alive (503 unavailable, "owner not
// alive") or a named target that cannot take the object (409 conflict), then
// calls the owner's AdminService.Relocate over gRPC and answers with the
// node's final status when the relocation ended. The node's gRPC codes map to
// the API's: FailedPrecondition (not hosted there) and Aborted (already
// relocating) → 409 conflict, InvalidArgument → 400, Unavailable,
// DeadlineExceeded, Canceled and Unimplemented → 503 unavailable. The wait is
// bounded by the relocation's timeout plus RelocationSlack, and is detached
// from the HTTP request: a caller that goes away does not stop the relocation.
//
// GET /v1/relocations asks every live owner's AdminService.ListRelocations
// concurrently, each bounded by NodeListTimeout; a node that does not answer
// is listed under "unreachable", not as an error of the request.
//
// The gRPC connections to the nodes live in one pool: one connection per
// address, closed after poolIdle unused, and all closed at shutdown.
//
// # Lifecycle of Server.Run
//
//  1. Start the embedded etcd in Config.DataDir/etcd, unless
//     Config.EtcdEndpoints is set. Run blocks until it is ready
//     (bounded by Config.EtcdStartTimeout and ctx). The member may be one of
//     a cluster (Config.InitialCluster): it is ready once the cluster has a
//     quorum, and the process's client uses this member only, so each member
//     serves the API, and /readyz says whether it is in a quorum.
//  2. Create an etcd client (it does not wait for a connection: /readyz says
//     whether etcd answers), start following etcd's alarms and sizes, and
//     create the pool of node connections.
//  3. Listen on Config.HTTP, start the recovery controller (it campaigns in
//     its election from now on), and serve. Ready() is closed and HTTPAddr()
//     is known from here on. The server holds at most
//     Config.HTTPMaxConnections connections, each bounded by the read,
//     write and idle timeouts of Config (the routes that answer when a long
//     operation ended lift the write timeout for their request: http.go,
//     holdAnswer).
//  4. Wait until ctx is done, the HTTP server fails, or the embedded etcd
//     reports a fatal error.
//  5. Shut down in reverse order: http.Server.Shutdown (requests in flight
//     may finish, bounded by Config.ShutdownTimeout, then their connections are
//     closed), stop the recovery controller (a leader revokes its election
//     lease: another locationd leads at once), stop following etcd, close
//     the node pool (it cancels the node calls still in flight — a
//     relocation cancelled this way is stopped by its node — and waits for
//     them), close the etcd client, close the embedded etcd (which stops
//     its maintenance and waits for its goroutines). Run returns only after all of this: no goroutine it
//     started is left behind.
//
// Run returns nil after a shutdown caused by ctx, and the cause otherwise.
// A Server runs once.
//
// # Consistency of the answers
//
// Every answer that says whether an owner is alive judges it at the same etcd
// revision as the record it is about: GET /v1/objects lists the records at one
// revision R (authority.Store.List) and reads the owner keys WithRev(R); GET
// /v1/objects/{object} reads the record and its owner's key in one transaction
// (authority.Store.ReadMany). So "ownerAlive" and "orphaned" are true
// statements about one revision, never a mix of two moments. An owner is alive
// while owners/<id> exists with CreateRevision equal to the record's
// owner.generation (docs/design.md §2): a restarted node is a different owner.
package locationd
