package commitmodel

import (
	"fmt"
	"hash/maphash"
	"strings"
)

// Broken checks the guarantees that hold in every state:
//   - one owner: a node serves an object only while its record names
//     that node (so at most one node serves it);
//   - no object halted for good: once every deadline passed and nothing
//     but a crash can happen, every object is served by exactly one live
//     node.
//
// The guarantees only a step can break (a source that drops its copy with
// no commit applied, a recovery that starts afresh what a live target
// holds) are Step.Broke.
func (c Config) Broken(s State, final bool) string {
	for o := range Objects {
		r := s.rec[o]
		if s.sAlive && s.src[o].phase == serving && r.owner != nodeS {
			return fmt.Sprintf("two owners: S serves o%d, whose record names %v", o, r.owner)
		}
		if s.tAlive && s.tgt[o].serving && r.owner != nodeT {
			return fmt.Sprintf("two owners: T serves o%d, whose record names %v", o, r.owner)
		}
		if !final {
			continue
		}
		n := 0
		if s.sAlive && s.src[o].phase == serving {
			n++
		}
		if s.tAlive && s.tgt[o].serving {
			n++
		}
		if r.owner == nodeN {
			n++
		}
		if n != 1 {
			return fmt.Sprintf("stuck: with nothing left to happen, %d nodes serve o%d", n, o)
		}
	}
	return ""
}

// Result is what a check found.
type Result struct {
	States int
	// Violation is the broken guarantee and Trace the shortest way to it,
	// one step a line ("" when every guarantee held).
	Violation string
	Trace     []string
}

func (r Result) String() string {
	if r.Violation == "" {
		return fmt.Sprintf("%d states, every guarantee holds", r.States)
	}
	return fmt.Sprintf("%d states; %s, after:\n  %s", r.States, r.Violation, strings.Join(r.Trace, "\n  "))
}

// Check walks every state reachable from Initial, breadth first, and
// stops at the first broken guarantee: its trace is a shortest one. Like
// TLC, it keeps a 64-bit fingerprint of each state seen, not the state
// (millions of states in tens of megabytes; two states sharing a
// fingerprint, about one chance in 10^12 here, would hide one of them).
func (c Config) Check() Result {
	seed := maphash.MakeSeed()
	fp := func(s State) uint64 { return maphash.Comparable(seed, s) }
	start := Initial()
	parent := map[uint64]uint64{fp(start): fp(start)}
	queue := []State{start}
	fail := func(s State, last Step, v string) Result {
		return Result{States: len(parent), Violation: v, Trace: c.trace(start, s, last, parent, fp)}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		next := c.Next(s)
		final := true
		for m := range Moves {
			final = final && (s.past[m] || !s.begun[m])
		}
		for _, st := range next {
			final = final && st.Fault
		}
		if v := c.Broken(s, final); v != "" && final {
			return fail(s, Step{}, v)
		}
		for _, st := range next {
			if st.Broke != "" && !c.OwnersOnly {
				return fail(s, st, st.Broke)
			}
			if v := c.Broken(st.To, false); v != "" {
				return fail(s, st, v)
			}
			f := fp(st.To)
			if _, ok := parent[f]; ok {
				continue
			}
			parent[f] = fp(s)
			queue = append(queue, st.To)
		}
	}
	return Result{States: len(parent)}
}

// trace replays the way from start to s (its fingerprints, child to
// parent, in parent), then last: the names of its steps.
func (c Config) trace(start, s State, last Step, parent map[uint64]uint64, fp func(State) uint64) []string {
	var chain []uint64
	for f := fp(s); f != fp(start); f = parent[f] {
		chain = append(chain, f)
	}
	var names []string
	at := start
	for i := len(chain) - 1; i >= 0; i-- {
		for _, st := range c.Next(at) {
			if fp(st.To) == chain[i] {
				names, at = append(names, st.What.String()), st.To
				break
			}
		}
	}
	if last.What.format != "" {
		names = append(names, last.What.String())
	}
	return names
}
