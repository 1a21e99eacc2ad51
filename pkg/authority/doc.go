// Package authority reads and writes meshloc's authority records in etcd: who
// owns each object (docs/design.md §2–§3). It is the only writer of
// authority/, catalog/, relocations/ and state/ keys.
//
// Every write is one etcd transaction:
//
//	Activate  If CreateRevision(auth)=0 ∧ owner alive ∧ catalog unchanged      Then put record, bump catalog
//	Intend    If ModRevision(auth)=seen ∧ source alive                           Then record relocating + intent
//	Commit    If ModRevision(auth_i)=expected_i ∀i ∧ CreateRevision(owners/T)=gen Then every participant → T, ownerGeneration+1
//	Preserve  If ModRevision(auth)=seen ∧ source alive                           Then record without intent (store version bumps)
//	Recover   If ModRevision(auth)=seen ∧ old owner gone ∧ new owner alive       Then objectGeneration+1 on the new owner
//	Join      If ModRevision(group)=g ∧ ModRevision(actor)=a (or absent) ∧ owner alive  Then both sides of the membership (group.go)
//	Leave     If ModRevision(group)=g ∧ ModRevision(actor)=a ∧ owner alive       Then both sides of the membership (group.go)
//
// A group's intent, commit, preserve and recovery cover the group record and
// every member in one transaction each (IntentRequest.Members,
// PreserveRequest.Members, Recover of a group or member); an Actor Join's
// commit writes the membership with the move (CommitRequest.Join). Limits
// bounds a group so that those transactions fit etcd's caps (limits.go).
//
//	          [∧ CreateRevision(guard)=rev: a recovery controller's election key, so a deposed leader writes nothing]
//	Persist   If ModRevision(auth)=seen ∧ owner alive ∧ ModRevision(state)=last   Then put state/<obj> (durable objects, state.go)
//
// "Alive" is always CreateRevision(owners/<id>) = the owner generation, never a
// timestamp. A failed compare is not an error: the result carries the current
// records (read in the Else branch of the same transaction), so the caller
// decides without another round trip.
//
// Invariants:
//   - exactly one of Commit and Preserve from the same store version wins;
//   - a group commits all participants or none (one transaction);
//   - object and owner generations never decrease;
//   - an RPC error is "uncertain", never "failed": Commit, Activate, Intend,
//     Preserve and Recover read back and compare exactly the planned bytes. Each
//     planned record names its relocation (LastRelocation), so no other write
//     can produce the same bytes. If the read-back fails too, the error wraps
//     ErrUncertain and the caller must resolve again (ResolveCommit).
//   - etcd's NOSPACE refusal is resolved the same way (the write that crossed
//     the quota was applied); found not written, Intend and Activate return
//     ErrNoSpace (resource_exhausted) and the other writes set
//     WriteResult.NoSpace: a full etcd is never reported as a lost race
//     (nospace.go).
//
// Cache is a location cache fed by a watch on authority/ (straight from
// etcd, or through a watch fan-out: WatchVia); it only moves forward in
// revision, re-lists after compaction, and knows when it was last known
// fresh: the send time of a linearizable read whose revision the watch has
// reached (freshness.go, docs/design.md §5).
//
// Not here: deciding whether to relocate (pkg/relocation), lease keeping
// (pkg/lease). This package does not fence by itself against an owner that
// thinks it is alive: the owner-key compare inside each transaction does.
package authority
