package commitmodel

import "fmt"

// Step is one transition: what happened, the state after it, and the
// guarantee it broke ("" when none; a broken guarantee that only a step
// can see, such as state thrown away, is found here rather than in a
// state).
type Step struct {
	What  What
	To    State
	Broke string
	// Fault: a crash or the clock, which can always happen; a state with
	// no other step left, past every deadline, is where the model ends.
	Fault bool
}

// What says what a step did; it is formatted only for a trace (millions
// of steps are taken, a trace has a dozen).
type What struct {
	format string
	args   [2]int
	n      int
}

func say(format string, args ...int) What {
	w := What{format: format, n: len(args)}
	copy(w.args[:], args)
	return w
}

func (w What) String() string {
	args := make([]any, w.n)
	for i := range args {
		args[i] = w.args[i]
	}
	return fmt.Sprintf(w.format, args...)
}

type steps []Step

func (ss *steps) add(what What, to State) { *ss = append(*ss, Step{What: what, To: to}) }

// Next lists every step the model can take from s.
func (c Config) Next(s State) []Step {
	var out steps
	for m := range Moves {
		if s.begun[m] && !s.past[m] {
			t := s
			t.past[m] = true
			out = append(out, Step{What: say("move %d's deadline passes", m), To: t, Fault: true})
		}
	}
	if s.sAlive {
		t := s
		t.sAlive = false // its owner key goes with it (a paused source is the lease's job)
		out = append(out, Step{What: say("S crashes"), To: t, Fault: true})
		c.source(s, &out)
	}
	if s.tAlive {
		t := s
		t.tAlive = false
		t.tgt = [Objects]tgt{}
		t.tBulk = [Moves]uint8{}
		out = append(out, Step{What: say("T crashes"), To: t, Fault: true})
		c.target(s, &out)
	}
	c.controller(s, &out)
	c.etcd(s, &out)
	return out
}

// source adds the source's steps (it is alive).
func (c Config) source(s State, out *steps) {
	c.begin(s, out)
	for o := range Objects {
		a := s.src[o]
		if a.phase == serving && a.moves == 1 && a.ver == 0 {
			// A write acknowledged between the two moves: a state the
			// first move's frames do not carry.
			t := s
			t.src[o].ver = 1
			out.add(say("S serves a write to o%d", o), t)
		}
		if a.phase != sealed {
			continue
		}
		m := s.move(o)
		if c.Rule == Intent && a.wrote == 0 && !a.sent {
			t := s
			if s.rec[o].rev == a.seen {
				t.src[o].wrote = t.write(o, nodeS, true)
				out.add(say("S writes o%d's intent", o), t)
			} else {
				t.src[o].phase = t.readBack(o)
				out.add(say("S's intent for o%d fails its compare", o), t)
			}
		}
		if !a.sent && c.mayPrepare(s, o) {
			t := s
			t.src[o].sent = true
			expect := a.seen
			if c.Rule == Intent {
				expect = a.wrote
			}
			if s.tAlive {
				t.tgt[o].st[m] = stage{inflight: true, expect: expect, ver: a.ver}
			}
			out.add(say("S sends o%d's PREPARE and state (move %d)", o, m), t)
		}
		c.giveUp(s, o, out)
		if s.rec[o].owner == nodeT {
			t := s
			t.src[o].phase = handed
			st := Step{What: say("S sees o%d's commit", o), To: t}
			if !s.committed[o] {
				st.Broke = fmt.Sprintf("S dropped o%d's state though no commit was applied", o)
			}
			*out = append(*out, st)
		}
	}
	if c.Rule == BulkKey {
		for b := range Moves {
			c.bulkSteps(s, b, out)
		}
	}
}

// begin starts the next move: the source seals some of the objects it
// serves (any non-empty set), once no move of its is still sealing.
func (c Config) begin(s State, out *steps) {
	m := 0
	for m < Moves && s.begun[m] {
		m++
	}
	if m == Moves {
		return
	}
	var can []int
	for o := range Objects {
		switch {
		case s.src[o].phase == sealed:
			return
		case s.src[o].phase == serving && s.rec[o].owner == nodeS:
			can = append(can, o)
		}
	}
	for set := 1; set < 1<<len(can); set++ {
		t := s
		t.begun[m] = true
		objs := 0
		for i, o := range can {
			if set&(1<<i) == 0 {
				continue
			}
			t.src[o] = src{phase: sealed, moves: uint8(m + 1), seen: s.rec[o].rev, ver: s.src[o].ver}
			objs |= 1 << o
		}
		out.add(say("S begins move %d: seals the objects of set %b", m, objs), t)
	}
}

// mayPrepare: what must be in etcd before the source sends PREPARE.
func (c Config) mayPrepare(s State, o int) bool {
	switch c.Rule {
	case Intent:
		return s.src[o].wrote > 0
	case BulkKey:
		return s.sBulk[s.move(o)] == bulkWritten
	}
	return true
}

// giveUp is the source abandoning one object's move, for any reason (its
// deadline, a refusal, its stop): a step it may take at any time.
func (c Config) giveUp(s State, o int, out *steps) {
	a := s.src[o]
	t := s
	needsWrite := a.sent || (c.Rule == Intent && a.wrote > 0)
	if !needsWrite || c.Faults.UnsealWithoutWrite {
		t.src[o].phase = serving
		out.add(say("S gives o%d up and serves it (nothing to undo)", o), t)
		return
	}
	expect := a.seen
	if c.Rule == Intent {
		expect = a.wrote
	}
	if s.rec[o].rev == expect || (c.Faults.PreserveSkipsCompare && s.rec[o].owner != nobody) {
		t.write(o, nodeS, false)
		t.src[o].phase = serving
		out.add(say("S's preserve of o%d wins", o), t)
		return
	}
	t.src[o].phase = t.readBack(o)
	out.add(say("S's preserve of o%d loses", o), t)
}
