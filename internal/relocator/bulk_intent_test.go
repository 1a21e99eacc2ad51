package relocator

import (
	"testing"
	"testing/synctest"

	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/relocation"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The one-write rule: a bulk run of 16 units, at most 6 a key, writes
// three bulk intents (once every seal returned), its target reads each
// once, each record is written once (its commit), and the run deletes
// its keys when it ends.
func TestBulkOneWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newBulkWorld(t, 16)
		w.oneWrite, w.store.bulk.maxUnits = true, 6
		var seen []record.Snapshot
		for _, o := range w.objs {
			seen = append(seen, w.store.get(o))
		}
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
		if b.writes != 3 || b.reads != 3 || b.deletes != 3 || len(b.keys) != 0 {
			t.Fatalf("bulk intents: %d written, %d read, %d deleted, %d left; want 3, 3, 3, 0", b.writes, b.reads, b.deletes, len(b.keys))
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
		var seen []record.Snapshot
		for _, o := range w.objs {
			seen = append(seen, w.store.get(o))
		}
		stale := w.objs[2]
		w.store.create(stale, w.store.get(stale).Record) // a newer store version than the seal's
		w.run(t, seen)
		for i, o := range w.objs {
			got := w.srcRs[i].outcome()
			if o == stale {
				if got != relocation.Aborted || w.srcRs[i].finish.Code != pb.Code_CODE_STALE_FENCE {
					t.Errorf("%s: %+v, want aborted stale_fence", o, w.srcRs[i].finish)
				}
				if h := w.srcMBs[i].history(); len(h) != 2 || h[0] != "seal" || h[1] != "reopen" {
					t.Errorf("%s: mailbox %v, want seal, reopen", o, h)
				}
				if r := w.store.get(o).Record; r.Owner != w.src {
					t.Errorf("%s moved: %+v", o, r)
				}
				continue
			}
			if got != relocation.Completed || w.store.get(o).Record.Owner != w.tgt {
				t.Errorf("%s: %v, owner %v", o, got, w.store.get(o).Record.Owner)
			}
		}
		if b := &w.store.bulk; b.writes != 2 || b.deletes != 1 {
			t.Fatalf("bulk intents: %d written, %d deleted; want 2 (the first refused), 1", b.writes, b.deletes)
		}
	})
}
