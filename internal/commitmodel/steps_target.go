package commitmodel

import "fmt"

// target adds the target's steps (it is alive).
func (c Config) target(s State, out *steps) {
	for o := range Objects {
		for m := range Moves {
			st := s.tgt[o].st[m]
			if st.inflight {
				t := s
				t.tgt[o].st[m].inflight = false
				if c.accepts(&t, o, m) {
					t.tgt[o].st[m].staged = true
					out.add(say("T checks o%d's PREPARE of move %d and stages it", o, m), t)
				} else {
					out.add(say("T refuses o%d's PREPARE of move %d", o, m), t)
				}
			}
			if !st.staged {
				continue
			}
			t := s
			t.tgt[o].st[m].staged = false
			switch {
			case s.past[m]:
				out.add(say("T discards o%d's stage of move %d at its deadline", o, m), t)
			case c.commits(s, o, m):
				t.write(o, nodeT, false)
				t.tgt[o].serving = true
				t.committed[o] = true
				st := Step{What: say("T commits o%d (move %d)", o, m), To: t}
				if s.tgt[o].st[m].ver != s.src[o].ver {
					st.Broke = fmt.Sprintf("T committed a stale state of o%d: a write acknowledged after it was captured is lost", o)
				}
				*out = append(*out, st)
			default:
				out.add(say("T's commit of o%d (move %d) fails its compares", o, m), t)
			}
		}
	}
}

// accepts is the target's check of a PREPARE of move m against etcd.
func (c Config) accepts(s *State, o, m int) bool {
	r, want := s.rec[o], s.tgt[o].st[m].expect
	switch c.Rule {
	case Intent:
		return r.intent && r.rev == want
	case BulkKey:
		if c.Faults.CommitSkipsBulkKey {
			return true
		}
		k := c.key(*s, m)
		if s.tBulk[m] == 0 {
			s.tBulk[m] = s.bulk[k] // one read for the whole bulk
		}
		return s.tBulk[m] > 0 && s.want[k][o] == want
	}
	return r.owner == nodeS && r.rev == want
}

// commits is the commit transaction's compares (the target's owner key
// holds: it is alive).
func (c Config) commits(s State, o, m int) bool {
	if s.rec[o].rev != s.tgt[o].st[m].expect {
		return false
	}
	switch c.Rule {
	case Intent:
		return s.rec[o].intent
	case BulkKey:
		return c.Faults.CommitSkipsBulkKey || s.bulk[c.key(s, m)] == s.tBulk[m]
	}
	return true
}

// key is the bulk whose key a frame of move m is checked against: its
// own, unless keys are named per source (then the last bulk's).
func (c Config) key(s State, m int) int {
	if c.Faults.KeyPerSource {
		for k := Moves - 1; k > m; k-- {
			if s.begun[k] {
				return k
			}
		}
	}
	return m
}

// controller adds the recovery controller's steps: it recovers an orphan
// onto N, and deletes a bulk key whose deadline passed.
func (c Config) controller(s State, out *steps) {
	for o := range Objects {
		r := s.rec[o]
		orphan := (r.owner == nodeS && !s.sAlive) || (r.owner == nodeT && !s.tAlive)
		if !orphan || c.defers(s, o) {
			continue
		}
		t := s
		t.write(o, nodeN, false)
		st := Step{What: say("the controller recovers o%d onto N", o), To: t}
		for m := range Moves {
			if s.tAlive && s.tgt[o].st[m].staged && !s.past[m] && c.commits(s, o, m) {
				st.Broke = fmt.Sprintf("recovery started o%d afresh while T held its state and could still commit it", o)
			}
		}
		*out = append(*out, st)
	}
	for b := range Moves {
		if c.Rule == BulkKey && s.bulk[b] > 0 && s.past[b] {
			t := s
			t.rev++
			t.bulk[b] = 0
			out.add(say("the controller deletes bulk %d's key, past its deadline", b), t)
		}
	}
}

// defers: the controller leaves an orphan to a live move's target until
// that move's deadline (and its grace) passed.
func (c Config) defers(s State, o int) bool {
	if c.Faults.RecoverIgnoresMove || !s.tAlive {
		return false
	}
	for m := range Moves {
		if s.past[m] {
			continue
		}
		switch {
		case c.Rule == Intent && s.rec[o].intent && s.src[o].moves == uint8(m+1):
			return true
		case c.Rule == BulkKey && s.names(m, o):
			return true
		}
	}
	return false
}
