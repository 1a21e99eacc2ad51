// Package etcdfault faults and checks an etcd cluster through clientv3, for
// the verification suite (`meshctl verify`, test/integration): who the
// members are, who leads, move the leadership (etcdctl move-leader), wait
// until the cluster is healthy again after a fault, and the end-of-run check
// of etcd's own robustness tests — every member has the same key-value state
// at the same revision (HashKV).
//
// It is not a process manager: killing, pausing and restarting members, or
// cutting their links (internal/tcpproxy), belongs to the caller. It talks to
// members by their client URLs only.
//
// Every function takes the client URLs of the members it should look at,
// asks each one separately (a member's own answer, not whatever member a
// balanced client happens to reach), and bounds each question by
// ProbeTimeout inside the caller's ctx, so a dead or partitioned member costs
// at most that long and never hangs the caller. Each call opens its own
// short-lived clients and closes them before it returns: no goroutine is
// left behind.
//
// What "healthy" means (Healthy, WaitHealthy): every endpoint answers its
// Status with a leader and no alarm, every endpoint names the same leader,
// and a linearizable read through each endpoint succeeds (so each is in a
// quorum and caught up to the leader's commit index). A learner endpoint is
// never healthy by this definition: it cannot serve linearizable reads.
package etcdfault
