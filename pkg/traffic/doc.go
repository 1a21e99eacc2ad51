// Package traffic counts the messages between objects in bounded memory:
// a Sketch keeps the heaviest edges (sender → destination) of the object
// graph a node sees, with the Space-Saving algorithm (Metwally, Agrawal and
// El Abbadi, 2005), and lets old traffic fade (every count halves once per
// half-life), so the heaviest edges are those of the recent past.
//
// A node observes each message its objects send as the destination answers
// it (pkg/node), and serves its sketch to locationd (AdminService.Traffic),
// whose rebalancer puts heavy edges on one node (internal/rebalance,
// co-location).
//
// # Guarantees
//
// With capacity k, an edge whose true count is above total/k is always in
// the sketch; a kept edge's count overestimates its true count by at most
// its Err, which is at most total/k. Memory is O(k), each Observe O(log k).
//
// It is pure: no clock (time arrives as Unix milliseconds), no goroutines,
// no I/O. Not safe for concurrent use.
package traffic
