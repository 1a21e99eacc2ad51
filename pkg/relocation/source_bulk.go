package relocation

import (
	"fmt"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The one-write rule's source side (docs/proposals/one-write-bulk-moves.md).
// A bulk unit (SourceConfig.BulkIntent) writes no intent into its record:
// it seals at once, and once captured asks for its bulk's key
// (AwaitBulkIntent) and waits in SourceBulkIntent. The driver writes the
// key once for every unit of the bulk that asked and tells each one
// (BulkIntentResult). Only then does PREPARE leave. Until it does the unit
// gives up with no write at all, whatever became of the key: nothing can
// commit without the nonce, which travels only in PREPARE.

// AwaitBulkIntent asks the driver to write Unit into its bulk's key (with
// the other units that asked, to the same Target by the same deadline);
// result: BulkIntentResult.
type AwaitBulkIntent struct {
	Unit       record.BulkUnit
	Target     TargetRef
	DeadlineMs int64
}

// BulkIntentResult is the result of AwaitBulkIntent.
type BulkIntentResult struct {
	// Written: the key holds the unit's intent; ID is the key's bulk id
	// (relocations/<ID>), which PREPARE names.
	Written bool
	ID      string
	// Not written: the unit's record as the failed write read it (Found),
	// and whether the source was alive then.
	Current    record.Snapshot
	Found      bool
	OwnerAlive bool
	// Err: the write failed or its outcome is unknown (no write is needed
	// to undo it: no PREPARE left).
	Err error
}

func (AwaitBulkIntent) action() {}
func (BulkIntentResult) event() {}

// startBulk is Start for a bulk unit: the seal, at once, on the record as
// planned (the key's write compares its store version).
func (s *Source) startBulk() []Action {
	if len(s.cfg.Members) > 0 || s.cfg.JoinGroup != "" || s.cfg.Object.Object.Kind != keyspace.KindActor {
		return []Action{s.finish(Failed, pb.Code_CODE_INTERNAL, "a bulk unit moves one actor outside any group")}
	}
	s.seen = s.cfg.Object
	s.phase = SourceCapturing
	return []Action{Seal{Participants: s.Participants()}}
}

// awaitBulk holds the captured payload until the bulk's key is written.
func (s *Source) awaitBulk(segs [][]byte) []Action {
	s.phase, s.segs = SourceBulkIntent, segs
	return []Action{AwaitBulkIntent{Target: s.cfg.Target, DeadlineMs: s.cfg.DeadlineMs, Unit: record.BulkUnit{Object: s.seen.Object.String(),
		RelocationID: s.cfg.ID.String(), NonceHash: record.HashNonce(s.cfg.Nonce), StoreVersion: s.seen.StoreVersion}}}
}

func (s *Source) stepBulkIntent(ev Event) ([]Action, error) {
	switch e := ev.(type) {
	case BulkIntentResult:
		switch {
		case e.Written && e.ID != "":
			s.prepare.BulkId = e.ID
			segs := s.segs
			s.segs = nil
			return s.sendPrepare(segs), nil
		case e.Err != nil:
			return s.giveUpBulk(pb.Code_CODE_UNAVAILABLE, "bulk intent not written: "+e.Err.Error()), nil
		case !e.Found:
			return s.lost("the record disappeared before the bulk intent")
		}
		r := e.Current.Record
		if !e.OwnerAlive || r.Owner != s.cfg.Self || r.ObjectGeneration != s.seen.Record.ObjectGeneration || r.AuthorityGeneration != s.seen.Record.AuthorityGeneration {
			return s.lost(fmt.Sprintf("the record moved to %s before the bulk intent", r.Owner))
		}
		s.seen = e.Current
		return s.giveUpBulk(pb.Code_CODE_STALE_FENCE, "bulk intent not written: the record changed since the seal"), nil
	case Tick:
		if e.NowMs >= s.cfg.DeadlineMs {
			return s.giveUpBulk(pb.Code_CODE_DEADLINE_EXCEEDED, "no bulk intent before the deadline"), nil
		}
		return nil, nil
	case StreamBroken:
		return s.giveUpBulk(pb.Code_CODE_UNAVAILABLE, "stream to the target broke before PREPARE"), nil
	case Stop:
		return s.giveUpBulk(pb.Code_CODE_SHUTTING_DOWN, "source stopping before PREPARE"), nil
	case Observed:
		return nil, nil
	}
	return nil, invalid(s.phase, ev)
}

// giveUpBulk ends a bulk unit before its PREPARE left: the object serves
// here again, on its record as last read (nothing of the move wrote it).
func (s *Source) giveUpBulk(code pb.Code, msg string) []Action {
	s.segs = nil
	return []Action{Reopen{Record: s.seen}, s.finish(Aborted, code, msg)}
}
