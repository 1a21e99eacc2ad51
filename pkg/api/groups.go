package api

import ()

// Group routes (docs/design.md §6):
//
//	POST /v1/groups        GroupRequest{group, on}            create an empty group on a node      → Group
//	POST /v1/groups/join   GroupRequest{group, actor, timeoutMs}  the actor joins (Actor Join if it lives elsewhere) → Group
//	POST /v1/groups/leave  GroupRequest{group, actor}          the actor leaves                      → Group
//	GET  /v1/groups/{group}  e.g. /v1/groups/group/g1          the group's record and members        → Group
//
// Errors: invalid_argument (bad names or body), not_found (no such group,
// or node named by "on"), conflict (the group exists, the actor is already
// a member or not one, the group is at its size limit or busy, the join
// ended before READY), unavailable (the owner is not alive or did not
// answer). A refused request changes nothing.

// GroupRequest is the body of the POST group routes.
type GroupRequest struct {
	// Group is group/<id> (required).
	Group string `json:"group"`
	// Actor is actor/<type>/<id> (join and leave).
	Actor string `json:"actor,omitempty"`
	// On is the node (owner id) a create puts the group on; empty: a live
	// serving node with weight > 0, the one owning the fewest objects.
	On string `json:"on,omitempty"`
	// TimeoutMs bounds an Actor Join's relocation (0: the node's default).
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
}

// Group is a group's record as an operation left it (or as read).
type Group struct {
	Group string `json:"group"`
	// Owner is the owner pair "id@generation"; every member lives there.
	Owner   string   `json:"owner"`
	Members []string `json:"members"`
	// StoreVersion of the group's record (0 when the answer comes from a
	// join at READY: the commit is still to come).
	StoreVersion int64 `json:"storeVersion"`
	// OwnerAlive, for GET: the owner key is live at the record's revision.
	OwnerAlive bool `json:"ownerAlive,omitempty"`
	// Revision, for GET: the etcd revision read at.
	Revision int64 `json:"revision,omitempty"`
	// Relocation, for an Actor Join: the relocation that moves the actor to
	// the group's node, as it was at READY, when the join answered. Its end
	// (completed, or aborted when the source preserved at the deadline) is
	// listed by GET /v1/relocations?object=<actor>.
	Relocation *Relocation `json:"relocation,omitempty"`
}
