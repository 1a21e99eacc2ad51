package relocator

import (
	"testing"
	"testing/synctest"

	"github.com/meshloc/meshloc/pkg/relocation"
)

// The one-write rule: a bulk run of 16 units, at most 6 a key, writes its
// units' bulk intents (at least three), its target reads each once, each
// record is written once (its commit), and the run deletes its keys when
// it ends.
func TestBulkOneWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newBulkWorld(t, 16)
		w.oneWrite, w.store.bulk.maxUnits = true, 6
		seen := w.snapshots()
		w.run(t, seen)
		for i, o := range w.objs {
			if got := w.srcRs[i].outcome(); got != relocation.Completed {
				t.Errorf("%s: source %v (%+v)", o, got, w.srcRs[i].finish)
			}
			r := w.store.get(o)
			if r.Record.Owner != w.tgt || r.Record.AuthorityGeneration != 2 || r.Record.Intent != nil {
				t.Errorf("%s: record %+v", o, r.Record)
			}
			if mb := w.tgtMBs[o.String()]; mb == nil || mb.admitted == nil {
				t.Errorf("%s: target mailbox %+v", o, mb)
			}
		}
		b := &w.store.bulk
		if b.writes < 3 || b.reads != b.writes || b.deletes != b.writes || len(b.keys) != 0 {
			t.Fatalf("bulk intents: %d written, %d read, %d deleted, %d left; want 3 or more, each read once and deleted", b.writes, b.reads, b.deletes, len(b.keys))
		}
		for i, o := range w.objs {
			if n := w.store.objs[o.String()].StoreVersion - seen[i].StoreVersion; n <= 0 {
				t.Errorf("%s: not written", o)
			}
		}
	})
}

// A unit whose record changed after its seal is left out of the bulk's
// intent: it gives up with no write (sealed, then reopened), the others
// are written under the next id and move.
func TestBulkOneWriteStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newBulkWorld(t, 5)
		w.oneWrite = true
		seen := w.snapshots()
		stale := w.objs[2]
		w.store.create(stale, w.store.get(stale).Record) // a newer store version than the seal's
		w.run(t, seen)
		w.staleAlone(t, stale, "seal", "reopen") // sealed, reopened with no write
		if b := &w.store.bulk; b.deletes < 1 || b.writes != b.deletes+1 {
			t.Fatalf("bulk intents: %d written, %d deleted; want one refused (the stale unit's), the others deleted", b.writes, b.deletes)
		}
	})
}

// A unit whose seal waits on a long handler holds up no other: the units
// captured go in bulk intents of their own and move; the slow one moves
// too once captured, before its deadline.
func TestBulkOneWriteSlowSeal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newBulkWorld(t, 6)
		w.oneWrite = true
		w.srcMBs[0].sealWait = w.timeout / 2
		w.run(t, w.snapshots())
		for i, o := range w.objs {
			if got := w.srcRs[i].outcome(); got != relocation.Completed {
				t.Errorf("%s: %+v", o, w.srcRs[i].finish)
			}
		}
		slow, fast := w.store.objs[w.objs[0].String()].StoreVersion, w.store.objs[w.objs[1].String()].StoreVersion
		if b := &w.store.bulk; b.writes < 2 || slow <= fast {
			t.Fatalf("%d bulk intents; the slow unit committed at %d, another at %d: want its own, later", b.writes, slow, fast)
		}
	})
}
