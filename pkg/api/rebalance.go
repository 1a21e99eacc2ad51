package api

import ()

// Rebalancer limits.
const (
	// DefaultRebalanceBudget is the budget of a plan asked without one.
	DefaultRebalanceBudget = 32
	// MaxRebalanceBudget bounds a plan's budget.
	MaxRebalanceBudget = 10000
)

// Outcomes of a rebalance move besides a relocation's (completed, aborted,
// failed, shutdown).
const (
	// OutcomeSkipped: the move was not tried: the object moved, was pinned
	// or started relocating since the plan was made, or its owner refused
	// it before doing anything (resource_exhausted: its calls were slow, so
	// it paced its background relocations, and this one waited half its
	// timeout).
	OutcomeSkipped = "skipped"
	// OutcomeError: locationd could not ask the owner (see Code, Message).
	OutcomeError = "error"
)

// RebalanceRequest is the body of POST /v1/rebalance.
type RebalanceRequest struct {
	// Budget is the most moves of the plan (0: DefaultRebalanceBudget;
	// at most MaxRebalanceBudget).
	Budget int `json:"budget,omitempty"`
	// DryRun: plan only, move nothing (the answer of GET /v1/rebalance/plan).
	DryRun bool `json:"dryRun,omitempty"`
	// Colocate adds the co-location step: moves that put objects that
	// message each other on one node, from the nodes' traffic sketches,
	// keeping every node within the load tolerance (reason "colocate").
	Colocate bool `json:"colocate,omitempty"`
}

// RebalanceTraffic is the traffic a co-location plan was made from, and
// what the plan does to it: Cross is the weight of the messages between
// objects on different nodes, Total of all (as the nodes' sketches count
// them: recent traffic weighs more).
type RebalanceTraffic struct {
	Total          uint64  `json:"total"`
	CrossBefore    uint64  `json:"crossBefore"`
	CrossAfter     uint64  `json:"crossAfter"`
	FractionBefore float64 `json:"fractionBefore"`
	FractionAfter  float64 `json:"fractionAfter"`
	// Edges between two objects of the plan (pairs of objects).
	Edges int `json:"edges"`
	// Nodes that answered with their sketch; Unreachable did not.
	Nodes       int      `json:"nodes"`
	Unreachable []string `json:"unreachable,omitempty"`
}

// RebalanceMove is one move of a plan, with its outcome once run.
type RebalanceMove struct {
	Object string `json:"object"`
	From   string `json:"from"`
	To     string `json:"to"`
	// Reason: load (the owner holds more than its weighted fair share),
	// weight (the owner has weight 0), drain (the owner is draining),
	// colocate (it joins the objects it messages most).
	Reason string `json:"reason"`
	// Units of load it moves: 1, or 1+members for a group.
	Units int `json:"units"`
	// Outcome, once run: completed, aborted, failed, shutdown (the
	// relocation's), skipped or error; "" in a dry run.
	Outcome            string `json:"outcome,omitempty"`
	Code               string `json:"code,omitempty"`
	Message            string `json:"message,omitempty"`
	RelocationID       string `json:"relocationId,omitempty"`
	InterruptionMicros int64  `json:"interruptionMicros,omitempty"`
}

// RebalanceOwner is one live owner's load (objects, a group counting
// 1+members) before and after the plan.
type RebalanceOwner struct {
	ID     string `json:"id"`
	Weight int    `json:"weight"`
	State  string `json:"state"`
	Before int    `json:"before"`
	After  int    `json:"after"`
	// Fair is its weighted fair share (0 for an owner that takes no objects).
	Fair float64 `json:"fair"`
}

// RebalanceStuck is an object that should leave its owner (drain, weight)
// but cannot: pinned, relocating, member of a missing group, or no
// eligible target.
type RebalanceStuck struct {
	Object string `json:"object"`
	Owner  string `json:"owner"`
	Reason string `json:"reason"`
	Why    string `json:"why"`
}

// RebalancePlan answers GET /v1/rebalance/plan and POST /v1/rebalance.
type RebalancePlan struct {
	// Revision is the etcd revision the records and owners were read at.
	Revision  int64   `json:"revision"`
	Budget    int     `json:"budget"`
	Tolerance float64 `json:"tolerance"`
	DryRun    bool    `json:"dryRun"`
	// Moves in the order planned (drain, weight, then load).
	Moves  []RebalanceMove  `json:"moves"`
	Owners []RebalanceOwner `json:"owners"`
	Stuck  []RebalanceStuck `json:"stuck"`
	// BudgetExhausted: more moves were wanted; run again to continue.
	BudgetExhausted bool `json:"budgetExhausted"`
	// Colocate: the plan has the co-location step; Traffic its figures.
	Colocate bool              `json:"colocate,omitempty"`
	Traffic  *RebalanceTraffic `json:"traffic,omitempty"`
	// When run: moves completed, skipped, and not completed (failed).
	Completed int `json:"completed"`
	Skipped   int `json:"skipped"`
	Failed    int `json:"failed"`
}
