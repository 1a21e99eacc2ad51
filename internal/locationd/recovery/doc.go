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
// The leader goes over the orphans in name order, in steps: each takes up
// to a tenth of a second's worth at Config.Rate (at most 1,024 orphans; one
// at Rate 10), and two steps overlap (one reads while the other writes).
// Config.Rate caps the orphans attempted per second (default 10,000).
//
// A step reads its orphans' records again from etcd (as many gets per
// request as etcd's --max-txn-ops allows, Config.Limits) and judges each:
// its record must still name the owner the view holds dead, at a store
// version the view has reached (so it has seen that owner's key; an owner
// pair that is gone never lives again); else it raced. It then picks a
// live node by pkg/placement, the rule a meshnode uses when a call finds an
// orphan: serving, weight > 0, hosting the type, rendezvous-ranked, the
// less loaded of the top two — loads as the view counted them when the
// pass began plus what the pass placed since, so a step spreads as if its
// orphans were placed one by one. A group goes first, and its members
// follow to the group's new owner. An orphan still relocating whose target
// is alive is left alone until its intent's deadline plus Config.Grace: the
// target may yet commit it with its state (docs/design.md §4 step 5).
//
// The step's recoveries are written with authority.Store.RecoverMany: each
// orphan is its own nested transaction with its own compares — its record's
// store version as read, its catalog entry, the old owner gone, the new
// owner alive, and this controller still leading (the election key's
// CreateRevision) — Then objectGeneration+1 on the new owner; many share
// one etcd request (123 with etcd's default --max-txn-ops of 128). One
// whose compare fails is not applied, and its batch-mates are; it is
// counted raced and looked at again in the next pass, from a fresh read.
// meshloc_locationd_recovery_requests_total counts the etcd write requests
// the recoveries took.
//
// The node then serves the object as one re-created by recovery, when it
// is first called (a recovered record costs a node only its location
// cache's entry until then): a memory object starts from fresh state, and
// the first call is answered CODE_STATE_LOST (the state died with its
// owner; the call was not executed), as when the node recovers it itself
// (pkg/node/internal/hosted, Recreated); a durable object is restored from its
// persisted state. Outcomes are counted in
// meshloc_locationd_recoveries_total{outcome}: recovered, raced (the record
// moved, its owner is alive, or its new owner died), no_target (no
// eligible node), failed (etcd did not answer, or the result is
// uncertain). The log says each step's recoveries in one line (their
// count, the dead and new owners); each object at debug level.
//
// What it is not: it does not decide that an owner is dead — etcd does, by
// expiring the owner's lease; nor does it move objects between live owners
// (internal/rebalance does, through the nodes).
package recovery
