// Package fanout is meshloc's watch fan-out: it serves etcd's Watch API
// (etcdserverpb.Watch, so any clientv3 client can use it) to the location
// caches and owner directories of many nodes from one etcd watch per
// watched range. With it, what etcd does for one record change no longer
// grows with the number of processes that follow the records
// (docs/design.md §5 "Watch fan-out").
//
// It serves only the ranges it is given (a cluster's authority/ and
// owners/ prefixes, whole): a watch of any other range, or one asking for
// previous values, is refused at creation. Nothing but watches goes
// through it; nodes send every read and transaction to etcd themselves,
// under their own identity.
//
// What a follower of a fan-out may rely on, as on etcd itself:
//
//   - No gap, no reordering: a watcher from revision r receives every event
//     of its range from r on, in revision order, each once. A watcher that
//     joins at a revision the shared watch already passed is served from a
//     bounded history of recent events or, older than that, by a watch of
//     its own on etcd until it reaches the history (a catch-up); etcd's
//     compaction of that revision reaches it as etcd would send it.
//   - A progress notification of revision h is sent to a watcher only once
//     every event of its range up to h was sent to it. Watchers created with
//     progress_notify get one after each notification etcd gives the shared
//     watch; a ProgressRequest from any client makes the fan-out ask etcd for
//     one (on its own stream, after the request arrived).
//   - An error of the shared watch (etcd's "no leader" on a lost leader, a
//     compaction, a lost permission) cancels every watcher of it with
//     etcd's reason, as etcd would have cancelled each of them.
//   - A client that does not read its stream fast enough (its queue of
//     responses full) has the stream closed with Unavailable; clientv3 then
//     resumes each of its watches from the revision it had reached.
//   - Bounded: a history of Options.History events per range, Options.Queue
//     responses per client stream, 64 watches per stream, 128 catch-ups at
//     once; a create beyond a cap is refused with the reason (a location
//     cache re-lists and watches again after a backoff).
//
// Why not etcd's own gRPC proxy (grpcproxy): it drops ProgressRequest; it
// reads WithRequireLeader from a server stream's outgoing metadata, so a
// network client's never counts; it can merge a watcher that is catching
// up (whose batches are headed with the current revision) into a shared
// watch ahead of it, skipping the events between; and a shared watch whose
// etcd watch ended keeps accepting new watchers that then never hear
// anything (etcd-io/etcd#21813). Each would break what a location cache
// relies on (docs/design.md §5).
package fanout
