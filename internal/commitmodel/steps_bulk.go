package commitmodel

// bulkSteps adds the source's steps on bulk b's key (BulkKey): its write
// (whose reply may be lost), the read back of a write with no reply, the
// whole bulk's abort and the key's removal once the bulk ended.
func (c Config) bulkSteps(s State, b int, out *steps) {
	var sealedIn []int // b's members still sealed in b
	for o := range Objects {
		if s.src[o].moves == uint8(b+1) && s.src[o].phase == sealed {
			sealedIn = append(sealedIn, o)
		}
	}
	switch {
	case s.sBulk[b] == bulkUntried && len(sealedIn) > 0:
		t := s
		for _, o := range sealedIn {
			t.want[b][o] = s.src[o].seen
		}
		sent := t
		ok := t.applyBulk(b)
		t.learn(b, ok, sealedIn)
		out.add(pick(ok, say("S writes bulk %d's key", b), say("bulk %d's key fails its compares", b)), t)
		sent.sBulk[b], sent.inFlight[b] = bulkUncertain, true
		out.add(say("S's write of bulk %d's key gets no reply", b), sent)
	case s.sBulk[b] == bulkUncertain:
		// It reads the key back: there, the move goes on; not there (yet),
		// it gives the move up, which needs no write while no PREPARE left.
		t := s
		ok := s.bulk[b] > 0
		t.learn(b, ok, sealedIn)
		out.add(pick(ok, say("S reads bulk %d's key back: written", b), say("S reads bulk %d's key back: absent; it gives the move up", b)), t)
	}
	if s.bulk[b] == 0 || s.sBulk[b] != bulkWritten {
		return
	}
	if len(sealedIn) == 0 {
		t := s
		t.rev++
		t.bulk[b] = 0
		out.add(say("S deletes bulk %d's key: the bulk ended", b), t)
		return
	}
	if c.BulkAbort {
		t := s
		t.rev++
		t.bulk[b] = 0
		for _, o := range sealedIn {
			if s.rec[o].owner == nodeS && s.rec[o].rev == s.src[o].seen {
				t.src[o].phase = serving
			} else {
				t.src[o].phase = t.readBack(o)
			}
		}
		out.add(say("S aborts bulk %d: deletes its key, reads its records", b), t)
	}
}

// learn records what the source learned of bulk b's key: written (the
// move goes on) or not (it gives the move up, unsealing sealedIn).
func (s *State) learn(b int, written bool, sealedIn []int) {
	if written {
		s.sBulk[b] = bulkWritten
		return
	}
	s.sBulk[b] = bulkRefused
	s.unseal(sealedIn)
}

func pick(ok bool, yes, no What) What {
	if ok {
		return yes
	}
	return no
}

// applyBulk applies bulk b's key write if its compares hold: every member's
// record at the version the source sealed it at, the source alive.
func (s *State) applyBulk(b int) bool {
	if !s.sAlive {
		return false
	}
	for o := range Objects {
		if w := s.want[b][o]; w > 0 && s.rec[o].rev != w {
			return false
		}
	}
	s.rev++
	s.bulk[b] = s.rev
	return true
}

// unseal gives objects back to serving, or to whoever etcd says owns them.
func (s *State) unseal(objs []int) {
	for _, o := range objs {
		s.src[o].phase = s.readBack(o)
	}
}

// names: bulk b's key names o.
func (s *State) names(b, o int) bool { return s.bulk[b] > 0 && s.want[b][o] > 0 }

// etcd adds etcd's own steps: a write whose reply was lost is applied
// late (its compares decide then) or never.
func (c Config) etcd(s State, out *steps) {
	for b := range Moves {
		if !s.inFlight[b] {
			continue
		}
		t := s
		t.inFlight[b] = false
		if t.applyBulk(b) {
			out.add(say("etcd applies bulk %d's key late", b), t)
		}
		t = s
		t.inFlight[b] = false
		out.add(say("etcd never applies bulk %d's key", b), t)
	}
}
