// Package locationd is the server logic of the locationd binary (DESIGN.md
// §8): it runs an embedded etcd (or uses an existing cluster), and serves the
// location API over HTTP — who the live owners are, who owns which object, and
// which objects lost their owner — with /healthz, /readyz and /metrics.
//
// What it is not (yet): it writes nothing. Placement, recovery, relocation,
// drain and the rebalancer come later; every ownership write goes through
// pkg/authority and its fenced transactions, never through this package.
//
// # Lifecycle of Server.Run
//
//  1. Start the embedded etcd in Config.DataDir/etcd, unless
//     Config.EtcdEndpoints is set. Run blocks until it is ready
//     (bounded by Config.EtcdStartTimeout and ctx).
//  2. Create an etcd client (it does not wait for a connection: /readyz says
//     whether etcd answers).
//  3. Listen on Config.HTTP and serve. Ready() is closed and HTTPAddr() is
//     known from here on.
//  4. Wait until ctx is done, the HTTP server fails, or the embedded etcd
//     reports a fatal error.
//  5. Shut down in reverse order: http.Server.Shutdown (requests in flight
//     may finish, bounded by Config.ShutdownTimeout, then their connections are
//     closed), close the etcd client, close the embedded etcd (which waits for
//     its goroutines). Run returns only after all of this: no goroutine it
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
// owner.generation (DESIGN.md §2): a restarted node is a different owner.
package locationd
