// Package hosted owns the objects a node hosts, one Object each: its
// mailbox (one request at a time, FIFO, a request run inline when the
// object is idle), its instance, fence, timers and de-duplication table,
// its outbox of messages and their delivery, the journals of the sessions
// bound to it, and a durable object's write path (persisted before the
// reply). It also carries out the relocation actions on an object's queues
// — seal, capture, hold, reopen, drop, fail on a source (SourceMailbox, the
// relocator's SourceMailbox); restore and admit on a target — and keeps the
// reply routes of the node's requests that run elsewhere (Routes).
//
// What an object asks of its node (its lease, redirects, relays, the table
// of hosted objects, message and session RPCs) goes through the Node
// interface; what every object of a node shares is its Env. The node
// decides which objects exist, activates them, and runs relocations; this
// package decides nothing about a relocation's outcome.
package hosted
