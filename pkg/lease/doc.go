// Package lease is the owner keeper of a meshnode (design.md §1, §2, §7): it
// grants an etcd lease, creates the lease-bound key owners/<ownerId> whose
// CreateRevision is the owner generation, keeps the lease alive, and turns the
// loss of the lease into a cancelled context — before etcd can have let the
// lease expire. It also lists live owners (ListOwners) and holds the pure
// lease status function (Evaluate).
//
// # What it is not
//
// It does not fence writes by itself. Self-fencing is a local promise (stop
// serving, stop starting transactions); a process paused longer than the
// margin can still send a write after its lease is gone. Every ownership Txn
// must therefore also compare CreateRevision(owners/<ownerId>) == generation
// (Keeper.OwnerCmp), which etcd checks atomically: that compare, not this
// package, is the fence of docs/design.md §9.1. Nor does it know about objects,
// draining or relocation: Update only rewrites the descriptor.
//
// # Lifecycle
//
//	Start:  Grant(TTL) → Txn If CreateRevision(key)==0 Then Put(key, descriptor, WithLease) Else Get(key)
//	        key exists → wait ≤ AcquireWait for its DELETE, else *DuplicateOwnerError (lease revoked)
//	run:    every KeepAliveInterval: sentAt := now; KeepAliveOnce
//	          ok, in time      → deadline = sentAt + grantedTTL − Margin
//	          lease not found  → fenced, ErrLeaseLost
//	          other error      → retry with backoff; the deadline timer fences with ErrLeaseExpired
//	Close:  fenced with ErrClosed → goroutines stopped and waited for → Revoke
//
// Status over time, for the newest confirmed keep-alive sent at s:
//
//	s ─── Valid ───┤ s+TTL−2·Margin ─ Unusable ─┤ s+TTL−Margin = Deadline ─ Expired (final)
//
// # Invariants
//
//  1. Generation = CreateRevision of owners/<ownerId> = revision of the Txn
//     that created it; a restart creates the key again, so it grows.
//  2. Start never writes a key it did not create, and never holds two leases:
//     a lease it does not use is revoked.
//  3. The owner key is only written with WithLease(lease) (a Put without it
//     silently detaches the key from the lease) and only by a Txn comparing
//     CreateRevision == generation and the last seen ModRevision.
//  4. The deadline is sentAt + TTL − Margin of the newest confirmed send only
//     (etcd renews to receive time + TTL, it does not take a maximum). A reply
//     to an older send, or one processed after the deadline, changes nothing.
//     etcd's TTL is fixed at Grant, so the deadline only moves forward.
//  5. Fencing is final: once Ctx is done (first cause kept in Err), the keeper
//     never extends the deadline, never sends a keep-alive and never writes
//     again. A fenced owner must restart as a new generation.
//  6. Every goroutine (lease-keepalive, lease-deadline) is owned by the Keeper,
//     selects on its Ctx in every blocking operation and is waited for by Close.
//
// # Why the deadline is safe
//
// etcd extends a lease when it processes a keep-alive, to (receive time +
// TTL) on the leader. The request is received after it was sent, so the
// server-side expiry is at least sentAt + TTL (in real time). The keeper
// counts from sentAt, read on the monotonic clock just before the send, and
// subtracts Margin: local deadline = sentAt + TTL − Margin ≤ server expiry −
// Margin. Margin covers the rate difference between the two clocks (a local
// clock running slow by ρ needs Margin ≥ ρ·TTL) and the delay between the
// deadline timer and in-flight work observing Ctx. Measuring from the reply
// instead would add the whole round trip — possibly seconds — on the unsafe
// side. A leader change only helps: the new leader renews every lease to a full
// TTL. Wall-clock steps are irrelevant: only monotonic differences are used.
//
// Tolerated window: between the local deadline and the server-side expiry the
// lease may still exist in etcd while the keeper has given up. That costs
// availability (at most Margin plus a round trip), never safety.
//
// # Why KeepAliveOnce and not clientv3's KeepAlive
//
// The deadline needs the time each keep-alive was sent. clientv3.KeepAlive
// sends on its own schedule and delivers replies on a channel without saying
// which send they answer, so the only safe base would be the time the reply
// was read — which is unsafe by a round trip. KeepAliveOnce is one request
// whose send time we record, bounded by RequestTimeout, with no channel that
// must be drained (an undrained KeepAlive channel fills up and the client logs
// and drops replies). One request in flight at a time also makes replies
// trivially ordered; the state still ignores a reply to an older send.
//
// # Status
//
// Evaluate(StatusInput, now) is pure, in the manner of CockroachDB's lease
// status: Valid, then Unusable within Margin of the deadline (finish, start
// nothing new), Expired at the deadline; Lost and Closed are terminal facts.
package lease
