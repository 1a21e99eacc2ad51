package relocation

import (
	"fmt"

	"github.com/meshloc/meshloc/pkg/record"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Settling (doc.go, driver duty 5): after CUTOVER (or an OUTCOME before
// READY, or a preserve that did not decide) the source learns the outcome
// from the store, never from the target's word. Two sources tell it:
//
//   - Observed: the primary's record as the node's location cache holds it
//     (committed etcd data). One that shows this relocation committed (the
//     same object generation, a larger owner generation, another owner, no
//     intent) is exactly the record in which a settle read decides
//     "completed" (invariant 4); the owner key the read also takes plays no
//     part there. Any other change makes a read due.
//   - SettleResult, the result of ReadSettle: every participant and the
//     source's owner key at one revision, classified by settle.
//
// The machine reads one at a time: on entering settling, after a change it
// observed that is not the commit, after a frame from the target, and every
// SettleEveryMs (the deadline needs fresh reads). After an OK OUTCOME it
// first waits up to WatchGraceMs for the commit to be observed, rather than
// read; once the commit is observed it waits up to OutcomeGraceMs for the
// OUTCOME, which carries how many DATA requests the target applied (their
// replies come by relay; without it every one is redirected, which is
// correct but slower). A completed relocation then costs no etcd read.

// Settling's timing, in milliseconds of Tick time.
const (
	// SettleEveryMs is the longest time between two reads while settling.
	SettleEveryMs = 250
	// WatchGraceMs is how long after an OK OUTCOME the machine waits for
	// the commit to be observed before it reads.
	WatchGraceMs = 50
	// OutcomeGraceMs is how long after observing the commit the machine
	// waits for the target's OUTCOME before it drops its copy.
	OutcomeGraceMs = 250
)

// settleState is what settling keeps between events.
type settleState struct {
	reading    bool  // a ReadSettle is in flight
	readDue    bool  // another read is wanted once it returns
	lastReadMs int64 // when the last read was asked for
	seenSV     int64 // the primary's highest store version read or observed
	outcome    bool  // the target's OUTCOME arrived (its DATA count is known)
	outcomeOK  bool  // ... and said it committed
	admitted   bool  // Admitted was emitted
	// graceUntil: waiting for the commit to be observed after an OK
	// OUTCOME, until then (0: not waiting).
	graceUntil int64
	// observed: the commit, observed; waiting for the OUTCOME until
	// outcomeUntil.
	observed     *record.Location
	outcomeUntil int64
}

// WakeAtMs is the earliest Unix ms at which a Tick could make the machine
// act (0: none is due: the next step comes from an event): the deadline
// before READY (and while a bulk unit waits for its bulk's key); while settling the deadline, the end of a grace period, or
// the next periodic read. A driver may deliver Ticks only then.
func (s *Source) WakeAtMs() int64 {
	switch s.phase {
	case SourcePreparing, SourcePrecopying, SourceBulkIntent:
		return s.cfg.DeadlineMs
	case SourceSettling:
		if s.st.observed != nil {
			return s.st.outcomeUntil
		}
		at := s.cfg.DeadlineMs
		if s.st.graceUntil != 0 {
			at = min(at, s.st.graceUntil)
		} else if !s.st.reading {
			at = min(at, s.st.lastReadMs+SettleEveryMs)
		}
		return at
	}
	return 0
}

// noteOutcome takes the target's OUTCOME (any phase).
func (s *Source) noteOutcome(o *pb.Outcome) {
	s.applied = int(o.GetDataApplied())
	s.st.outcome = true
	s.st.outcomeOK = s.st.outcomeOK || o.GetCode() == pb.Code_CODE_OK
}

// admitted emits Admitted once.
func (s *Source) admitted() []Action {
	if s.st.admitted {
		return nil
	}
	s.st.admitted = true
	return []Action{Admitted{}}
}

// startSettling enters SourceSettling: after an OK OUTCOME it waits for the
// commit to be observed. Otherwise, after CUTOVER (readNow false), the
// target is committing right now: a read would most likely find the intent
// still there, so the machine waits for a change, a frame, or
// SettleEveryMs; after anything else it reads at once.
func (s *Source) startSettling(readNow bool) []Action {
	s.phase = SourceSettling
	if s.st.seenSV == 0 {
		s.st.seenSV = s.seen.StoreVersion
	}
	if s.st.outcomeOK {
		s.st.graceUntil = s.nowMs + WatchGraceMs
		return s.admitted()
	}
	if !readNow {
		s.st.lastReadMs = s.nowMs
		return nil
	}
	return s.read()
}

// read asks for a settle read, or for another once the one in flight
// returns.
func (s *Source) read() []Action {
	if s.st.reading {
		s.st.readDue = true
		return nil
	}
	s.st.reading, s.st.readDue, s.st.lastReadMs = true, false, s.nowMs
	return []Action{ReadSettle{}}
}

func (s *Source) stepSettling(ev Event) ([]Action, error) {
	switch e := ev.(type) {
	case SettleResult:
		s.st.reading = false
		if cur, ok := e.View.Objects[s.seen.Object.String()]; ok && e.Err == nil {
			s.st.seenSV = max(s.st.seenSV, cur.StoreVersion)
		}
		out, err := s.settle(e)
		if s.phase == SourceSettling && s.st.readDue {
			out = append(out, s.read()...)
		}
		return out, err
	case Observed:
		return s.observe(e.Location), nil
	case Received:
		switch f := e.Frame.GetFrame().(type) {
		case *pb.RelocationFrame_Outcome:
			if !s.sameID(f.Outcome.GetRelocationId()) {
				break
			}
			s.noteOutcome(f.Outcome)
			if s.st.observed != nil {
				return s.drop(*s.st.observed, record.View{}), nil // the commit was seen, the count is here now
			}
			if f.Outcome.GetCode() == pb.Code_CODE_OK {
				s.st.graceUntil = s.nowMs + WatchGraceMs
				return s.admitted(), nil
			}
		case *pb.RelocationFrame_Ready:
			return nil, nil // an eager cutover's target restored after CUTOVER came: nothing new
		case *pb.RelocationFrame_Failed:
			if s.prepare.GetEagerCutover() && !s.ready && s.sameID(f.Failed.GetRelocationId()) && s.st.observed == nil {
				// An eager cutover's target gave up before READY (its
				// assembly or restore failed): preserve now rather than
				// at the deadline. A compare-and-swap: if a commit landed
				// after all, the preserve fails and a read settles.
				return s.abort(f.Failed.GetCode(), "target failed: "+f.Failed.GetMessage()), nil
			}
		}
		return s.read(), nil // the store decides, not the target's word
	case Tick:
		// A watch reports changes only: a target that died or drains
		// after READY changes nothing, so the deadline is acted on here.
		// Preserving the last record read as ours is safe whatever
		// happened since: it is a compare-and-swap.
		if e.NowMs >= s.cfg.DeadlineMs && s.st.observed == nil {
			return s.abort(pb.Code_CODE_DEADLINE_EXCEEDED, "the target did not commit before the deadline"), nil
		}
		switch {
		case s.st.observed != nil:
			if e.NowMs >= s.st.outcomeUntil {
				return s.drop(*s.st.observed, record.View{}), nil // no OUTCOME (the target crashed after its commit?)
			}
			return nil, nil
		case s.st.graceUntil != 0:
			if e.NowMs >= s.st.graceUntil {
				s.st.graceUntil = 0
				return s.read(), nil
			}
			return nil, nil
		case !s.st.reading && e.NowMs-s.st.lastReadMs >= SettleEveryMs:
			return s.read(), nil
		}
		return nil, nil
	case StreamBroken:
		return nil, nil
	case Stop:
		return []Action{s.finish(Shutdown, pb.Code_CODE_SHUTTING_DOWN, "stopped while settling")}, nil
	}
	return nil, invalid(s.phase, ev)
}

// committed reports whether loc shows this relocation committed: the object
// generation the source moved, a larger owner generation, another owner, no
// intent (invariant 4).
func (s *Source) committed(loc record.Location) bool {
	want := s.seen.Record
	return !loc.Relocating && loc.ObjectGeneration == want.ObjectGeneration && loc.AuthorityGeneration > want.AuthorityGeneration && loc.Owner != s.cfg.Self
}

// observe takes a change of the primary's record seen in the cache.
func (s *Source) observe(loc record.Location) []Action {
	if loc.StoreVersion <= s.st.seenSV || s.st.observed != nil {
		return nil
	}
	s.st.seenSV = loc.StoreVersion
	if !s.committed(loc) {
		return s.read()
	}
	s.st.graceUntil = 0
	if s.st.outcome {
		return s.drop(loc, record.View{})
	}
	s.st.observed, s.st.outcomeUntil = &loc, s.nowMs+OutcomeGraceMs
	return s.admitted()
}

// drop ends a completed relocation: the copy goes, the first DATA requests
// the target applied get their replies by relay. v is the settle read that
// showed the commit (empty when it was observed).
func (s *Source) drop(loc record.Location, v record.View) []Action {
	out := s.admitted()
	return append(out, Drop{Committed: loc, DataApplied: s.dataApplied(), Members: s.membersAfter(loc, v)}, s.finish(Completed, pb.Code_CODE_OK, ""))
}

// settle classifies one read (docs/design.md §4 step 7):
// committed = same object generation, larger owner generation, another owner
// pair; still ours = the record we wrote; anything else, or our own lease gone
// while the record is still ours, = lost.
func (s *Source) settle(e SettleResult) ([]Action, error) {
	if e.Err != nil {
		return nil, nil // uncertain: the next read decides; never a loss
	}
	cur, ok := e.View.Objects[s.seen.Object.String()]
	if !ok {
		return s.lost("the record disappeared")
	}
	r, want := cur.Record, s.seen.Record
	switch {
	case r.ObjectGeneration == want.ObjectGeneration && r.AuthorityGeneration > want.AuthorityGeneration && r.Owner != s.cfg.Self:
		return s.drop(record.LocationOf(cur), e.View), nil
	case r.ObjectGeneration == want.ObjectGeneration && r.AuthorityGeneration == want.AuthorityGeneration && r.Owner == s.cfg.Self:
		if !e.View.Alive(s.cfg.Self) {
			return s.lost("the source's lease ended before the target committed")
		}
		s.seen = cur
		s.members = s.updated(e.View.Objects)
		// Once aborting (a failure before READY, or a preserve that was
		// uncertain or lost to a write that kept the record ours), preserve
		// again now: nothing else would wake the machine before the deadline.
		if s.aborting || s.nowMs >= s.cfg.DeadlineMs {
			return s.abort(pb.Code_CODE_DEADLINE_EXCEEDED, "the target did not commit before the deadline"), nil
		}
		return nil, nil
	}
	return s.lost(fmt.Sprintf("the record moved to %s with object generation %d", r.Owner, r.ObjectGeneration))
}

// stillOurs reports whether a failed write's current record is still this
// source's object at the generations it planned from, its owner alive.
func (s *Source) stillOurs(w WriteResult) bool {
	r, want := w.Snapshot.Record, s.cfg.Object.Record
	return w.Found && w.OwnerAlive && r.Owner == s.cfg.Self &&
		r.ObjectGeneration == want.ObjectGeneration && r.AuthorityGeneration == want.AuthorityGeneration
}

func (s *Source) dataApplied() int {
	if s.applied > 0 {
		return min(s.applied, s.boundary)
	}
	return 0
}

func (s *Source) lost(why string) ([]Action, error) {
	return []Action{
		FailPending{Code: pb.Code_CODE_UNAVAILABLE, Message: "relocation lost the object: " + why},
		s.finish(Failed, pb.Code_CODE_UNAVAILABLE, why),
	}, nil
}

func (s *Source) preserved(e PreserveResult) ([]Action, error) {
	if e.Err != nil {
		// Uncertain: settle decides (a read shows whether it was written).
		return s.startSettling(true), nil
	}
	if e.Result.Written {
		return []Action{Reopen{Record: e.Result.Snapshot, Members: s.membersIn(record.View{Objects: e.Result.Members})}, s.finish(Aborted, s.code, s.msg)}, nil
	}
	// The preserve lost: the target committed, or the object is gone.
	s.phase = SourceSettling
	if !e.Result.Found {
		return s.lost("the record disappeared")
	}
	objs := map[string]record.Snapshot{s.seen.Object.String(): e.Result.Snapshot}
	for k, v := range e.Result.Members {
		objs[k] = v
	}
	return s.settle(SettleResult{View: record.View{
		Objects: objs,
		Owners:  map[string]record.OwnerKey{s.cfg.Self.ID: ownerKey(e.Result.OwnerAlive, s.cfg.Self)},
	}})
}

// membersAfter returns every member's location after the commit that
// produced primary: as v shows it when v shows it moved, else as the commit
// wrote it (the same transaction moved every participant: the target's
// owner and node, one more owner generation, the primary's store version).
// nil when there are no members.
func (s *Source) membersAfter(primary record.Location, v record.View) map[string]record.Location {
	if len(s.members) == 0 {
		return nil
	}
	out := make(map[string]record.Location, len(s.members))
	for _, m := range s.members {
		if c, ok := v.Objects[m.Object.String()]; ok && c.Record.Owner != s.cfg.Self {
			out[m.Object.String()] = record.LocationOf(c)
			continue
		}
		out[m.Object.String()] = record.Location{Owner: primary.Owner, Node: primary.Node,
			ObjectGeneration: m.Record.ObjectGeneration, AuthorityGeneration: m.Record.AuthorityGeneration + 1, StoreVersion: primary.StoreVersion}
	}
	return out
}
