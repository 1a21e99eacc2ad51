package relocation

import (
	"fmt"
	"strings"

	"github.com/meshloc/meshloc/pkg/record"
)

// The fake store's and the bench's part of the one-write rule (source_bulk.go,
// target_bulk.go): relocations/<bulk id> as a key of its own, written once
// over the record's sealed version, compared by each commit, deleted by a
// whole-bulk abort.

// simBulkID is the bulk key's id in the simulation.
const simBulkID = "bulk1"

// fakeBulk is relocations/<id>: its intent and its ModRevision (0: absent).
type fakeBulk struct {
	intent record.BulkIntent
	rev    int64
}

// writeBulk: If CreateRevision(key)=0 ∧ ModRevision(auth)=unit's version ∧
// source alive Then put the key (the record is not written).
func (f *fakeStore) writeBulk(id string, b record.BulkIntent) BulkIntentResult {
	u := b.Units[0]
	if f.bulks[id].rev == 0 && f.rec.StoreVersion == u.StoreVersion && f.alive(b.Source) {
		if f.bulks == nil {
			f.bulks = map[string]fakeBulk{}
		}
		f.bulks[id] = fakeBulk{intent: b, rev: f.bump()}
		return BulkIntentResult{Written: true, ID: id}
	}
	return BulkIntentResult{Current: f.rec, Found: true, OwnerAlive: f.alive(b.Source)}
}

// readBulk is the target driver's read of a PREPARE's bulk key.
func (f *fakeStore) readBulk(id string) *BulkKey {
	if id == "" {
		return nil
	}
	k := f.bulks[id]
	return &BulkKey{ID: id, Intent: k.intent, Revision: k.rev, Found: k.rev != 0}
}

// deleteBulk is the whole-bulk abort (or the cleanup): the key goes.
func (f *fakeStore) deleteBulk(id string) bool {
	if f.bulks[id].rev == 0 {
		return false
	}
	delete(f.bulks, id)
	f.bump()
	return true
}

// bulkHolds is a bulk unit's commit's extra compares: the record's store
// version, and the key at the revision the target read.
func (f *fakeStore) bulkHolds(a Commit) bool {
	return a.Bulk == nil || (f.rec.StoreVersion == a.Participants[0].StoreVersion && f.bulks[a.Bulk.ID].rev == a.Bulk.Revision)
}

// bulkIntentOf is what the bulk driver writes for the one unit.
func (s *sim) bulkIntentOf(a AwaitBulkIntent) record.BulkIntent {
	return record.BulkIntent{Kind: record.BulkIntentKind, Source: s.self, Target: s.tgtID, TargetNode: simNode("t1"),
		DeadlineMs: s.cfg.DeadlineMs, Units: []record.BulkUnit{a.Unit}}
}

// completeBulk gives the source's AwaitBulkIntent its result.
func (s *sim) completeBulk(a AwaitBulkIntent, k outcomeKind) Event {
	switch k {
	case resUncertain:
		// Neither here nor there: the unit gives up; etcd may apply the
		// write later (property test: "land late").
		s.late = append(s.late, func() {
			if s.store.writeBulk(simBulkID, s.bulkIntentOf(a)).Written {
				s.printf("  etcd: the bulk intent lands late\n")
			}
		})
		return BulkIntentResult{Err: errUncertain}
	case resUncertainWrote:
		s.store.writeBulk(simBulkID, s.bulkIntentOf(a))
		return BulkIntentResult{Err: errUncertain}
	}
	r := s.store.writeBulk(simBulkID, s.bulkIntentOf(a))
	if r.Written {
		s.printf("  etcd: bulk intent written at rev=%d\n", s.store.bulks[simBulkID].rev)
	} else {
		s.printf("  etcd: bulk intent compare failed (sv=%d)\n", s.store.rec.StoreVersion)
	}
	return r
}

// describeBulks is the store line's part for bulk keys.
func (f *fakeStore) describeBulks(b *strings.Builder) {
	for id, k := range f.bulks {
		fmt.Fprintf(b, " relocations/%s@%d", id, k.rev)
	}
}

// bulkUnsent reports whether this is a bulk unit whose PREPARE never left.
func (s *sim) bulkUnsent() bool {
	if !s.cfg.Bulk {
		return false
	}
	for _, f := range s.sent[onTarget] {
		if f.GetPrepare() != nil {
			return false
		}
	}
	return true
}
