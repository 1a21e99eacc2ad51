// Package recovery is locationd's recovery controller (docs/design.md §3
// "recover", §8): one active instance per cluster, chosen by an etcd
// election among every locationd, watches for objects whose owner is gone
// (orphans), reports them, and — when enabled — re-activates each on a live
// node before anyone calls it.
//
// # Election
//
// Each Controller campaigns with go.etcd.io/etcd/client/v3/concurrency: a
// Session (a lease of Config.TTL, kept alive) and an Election on the prefix
// keyspace.Controller("recovery"). The candidate whose key is oldest leads;
// its key's value is a LeaderInfo (who, where, since when, orphans now,
// recoveries so far), re-proclaimed when it changes (at most every
// Config.ProclaimEvery), so any locationd can say who leads (ReadLeader). A
// leader that stops (shutdown) revokes its lease: the next candidate leads
// at once. A leader that dies, or is cut off from etcd, loses its lease
// within the TTL and the next candidate then leads.
//
// Leadership is a context: it ends when a watch on the election key sees it
// deleted (its lease expired or was revoked), when the session's keep-alive
// says the lease is lost (or went unanswered until the lease's deadline: a
// leader cut off from etcd), when a proclaim finds the key gone, or when
// Run's context ends; everything the leader runs stops with it. Like every lease-based election, this does not
// by itself keep a paused, deposed leader from acting (the client learns of
// the loss only after the fact): so every write of the leader is fenced in
// etcd as well — the recover transaction carries the election key's
// CreateRevision as one more compare (authority.Guard), and a deposed leader
// writes nothing. Two leaders for a moment would at worst race two fenced
// transactions, of which one wins.
//
// # Orphans
//
// The leader lists every owner key and authority record at one revision,
// then follows one watch over the key range from authority/ to owners/
// (one stream, so events come in revision order) and keeps, per record, its
// owner pair. An object is orphaned when its record's owner has no live key
// of that generation at the revision the view has reached — the rule of
// GET /v1/objects?orphaned=true. A compacted or broken watch re-lists.
// meshloc_locationd_orphaned_objects is the leader's count (0 on other locationd);
// meshloc_locationd_controller_leader is 1 on the leader.
//
// # Recovery (Config.Recover, --recover-orphans)
//
// For each orphan, at most Config.Rate per second, in name order, the leader
// re-reads the record and its owner key at one revision, and re-activates it
// on a live node with authority.Store.Recover (If the record is unchanged ∧
// the old owner is gone ∧ the new owner is alive ∧ this controller still
// leads, Then objectGeneration+1 on the new owner). The node is chosen by
// pkg/placement, the rule a meshnode uses when a call finds an orphan:
// serving, weight > 0, hosting the type, rendezvous-ranked, the less loaded
// of the top two. A group goes first, and its members follow to the group's
// new owner. An orphan still relocating whose target is alive is left alone
// until its intent's deadline plus Config.Grace: the target may yet commit
// it with its state (docs/design.md §4 step 5).
//
// The node then serves the object as one re-created by recovery: a memory
// object starts from fresh state, and the first call is answered
// CODE_STATE_LOST (the state died with its owner; the call was not
// executed), as when the node recovers it itself (pkg/node,
// recreatedHere); a durable object is restored from its persisted state. Outcomes are counted in meshloc_locationd_recoveries_total{outcome}:
// recovered, raced (the record moved or its owner is alive), no_target (no
// eligible node), failed (etcd did not answer, or the result is uncertain).
//
// What it is not: it does not decide that an owner is dead — etcd does, by
// expiring the owner's lease; nor does it move objects between live owners
// (internal/rebalance does, through the nodes).
package recovery
