// Package commitmodel owns the explicit-state models of relocation commit
// rules: the rule design.md §3 gives a move today (an intent written into
// every record, then the target's commit), and the rules proposed to move
// an idle object with one record write (docs/design/bulk-commit.md). A
// model is a handful of nodes, records and keys small enough to explore
// every interleaving of their steps, crashes and the deadline; the checker
// walks them all and reports the shortest way to any state that breaks a
// guarantee. It decides nothing at run time: it is the check a change of
// the commit rule must pass before the machines in pkg/relocation carry it.
package commitmodel
