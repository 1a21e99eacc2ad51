package node

import rtmetrics "runtime/metrics"

// SetRunQueue makes n's pacing read the run-queue wait histogram from f
// from its next tick on: tests make the calls look slow.
func SetRunQueue(n *Node, f func() *rtmetrics.Float64Histogram) { n.pacing.SetRunQueue(f) }
