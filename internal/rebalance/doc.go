// Package rebalance is the pure planner of locationd's rebalancer: given the
// live owners and the objects they own, it returns the relocations that
// spread the load, each with its reason. It does not move anything: locationd
// executes a plan through the owners' AdminService.Relocate (POST
// /v1/rebalance), or prints it (GET /v1/rebalance/plan, meshctl rebalance
// --dry-run).
//
// It is pure: no etcd, clock, randomness or goroutines. The same input, in
// any order, gives the same plan.
//
// # Units of load
//
// An actor that belongs to no group is a unit of load 1. A group is one unit
// of load 1+len(members): its members move with it, in one relocation of the
// group, and a member is never planned alone (a member whose group record is
// missing is counted on its owner and never moved). A unit is movable unless
// one of its records is pinned, or is relocating now. Objects whose owner is
// not among the live owners are orphans (the recovery controller's business):
// they count nowhere and never move.
//
// # The plan, in this order
//
//  1. drain: every movable unit of a draining owner moves away.
//
//  2. weight: every movable unit of a (not draining) owner with weight 0
//     moves away.
//
//  3. load: while an eligible owner holds more than its weighted fair share
//     by more than Tolerance (load > fair·(1+Tolerance), where fair = total ·
//     weight / Σ weights over the eligible owners), one of its units moves to
//     the eligible owner where it lowers Φ = Σ load²/weight the most; a move
//     that does not lower Φ is never made.
//
//  4. colocate (only with Input.Colocate; colocate.go): the object graph's
//     edges (messages between objects, counted by the nodes) are summed per
//     pair of units, a member's into its group's. While the budget lasts,
//     the unit whose move takes the most weight off the network moves: to
//     the eligible owner its edges weigh the most to, if that is more than
//     to its own owner, the target stays at most fair·(1+Tolerance) and the
//     source at least fair·(1−Tolerance); ties go to the emptier target,
//     then the smaller id. Each move strictly lowers the cross-owner weight,
//     so the step ends; Plan.Traffic gives that weight before and after.
//     It is greedy: a move that only a swap would allow (both owners at
//     their limit) is not planned.
//
// Eligible target: serving, weight > 0, hosting every type of the unit, the
// source's application version, not the source (the rule the node's own
// target choice applies). In steps 1 and 2 the target is the eligible owner
// with the least (load+size)/weight after the move. Ties go to the smaller
// owner id, then the smaller object name. A unit that must leave (steps 1–2)
// but has no eligible target, or is pinned, is listed in Plan.Stuck.
//
// # Invariants (the tests assert them)
//
//   - a pinned record never moves; a group member never moves alone;
//   - at most Budget moves; no object twice in one plan;
//   - never to a draining, joining or weight-0 owner, nor one that lacks a
//     type of the unit;
//   - convergence: step 3 only makes moves that strictly lower Φ, which
//     takes finitely many values, so it ends; and each step depends only on
//     the current assignment, so applying a plan that did not run out of
//     budget and planning again gives no move.
//
// What it does not do: it does not look at request rates or state sizes
// (load is a count of objects; traffic only in step 4), and it does not plan around relocations that
// will fail (a node that does not host an object in memory refuses to move
// it: the execution reports that move as failed).
package rebalance
