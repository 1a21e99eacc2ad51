package relocator

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// bulkPipe is a BulkPeer over a Pipe end: a batch goes frame by frame,
// and comes back one frame at a time (in order, as a real stream's).
type bulkPipe struct{ p Peer }

func (b bulkPipe) Send(fs []*pb.RelocationFrame) error {
	for _, f := range fs {
		if err := b.p.Send(f); err != nil {
			return err
		}
	}
	return nil
}

func (b bulkPipe) Recv() ([]*pb.RelocationFrame, error) {
	f, err := b.p.Recv()
	if err != nil {
		return nil, err
	}
	return []*pb.RelocationFrame{f}, nil
}

func (b bulkPipe) Close() { b.p.Close() }

// bulkWorld is a bulk move of n actors between two nodes, in memory.
type bulkWorld struct {
	*world
	objs   []keyspace.Object
	srcMBs []*fakeSourceMailbox
	srcRs  []*recorder
	tgtMBs map[string]*fakeTargetMailbox
	tgtRs  map[string]*recorder
	mu     sync.Mutex
	// listed: the source lists the run (BulkSource.Lister) as "bulk-1".
	listed bool
	// oneWrite: the units are bulk-intent ones, the run "bulk-1" writes
	// their keys (bulk_intent_test.go).
	oneWrite bool
}

func newBulkWorld(t *testing.T, n int) *bulkWorld {
	w := &bulkWorld{world: newWorld(t), tgtMBs: map[string]*fakeTargetMailbox{}, tgtRs: map[string]*recorder{}}
	for i := range n {
		obj := keyspace.Object{Kind: keyspace.KindActor, Type: "counter", ID: fmt.Sprintf("b%d", i)}
		w.store.create(obj, record.Record{Kind: obj.Kind, Type: obj.Type, ObjectGeneration: 1, AuthorityGeneration: 1,
			Owner: w.src, Node: w.srcNode, State: record.StateActive})
		w.objs = append(w.objs, obj)
		w.srcMBs = append(w.srcMBs, &fakeSourceMailbox{payload: [][]byte{[]byte("state-of-" + obj.ID)}})
		w.srcRs = append(w.srcRs, newRecorder())
	}
	return w
}

// run moves every object, planned from the records as they are now
// (seen: a record that changes after it fails its intent's compare).
func (w *bulkWorld) run(t *testing.T, seen []record.Snapshot) {
	a, b := Pipe()
	now := time.Now()
	src := &BulkSource{Self: w.src, Store: w.store, Peer: bulkPipe{a}, Watch: w.store, Stop: w.stopSrc}
	if w.listed {
		src.Lister, src.ID, src.Target = w.store, "bulk-1", w.tgt
	}
	if w.oneWrite {
		src.Intents, src.ID, src.Target = w.store, "bulk-1", w.tgt
	}
	for i, obj := range w.objs {
		m := relocation.NewSource(relocation.SourceConfig{ID: wire.NewRelocationID(), Object: seen[i], Self: w.src, SelfRoutingID: w.srcRID,
			Target: relocation.TargetRef{Owner: w.tgt, Node: w.tgtNode}, AppVersion: "v1", DeadlineMs: now.Add(w.timeout).UnixMilli(),
			ChunkSize: 1 << 10, EagerMaxBytes: 1 << 10, Nonce: wire.NewNonce(), PrecopyMinBytes: -1, BulkIntent: w.oneWrite})
		src.Units = append(src.Units, BulkSourceUnit{Machine: m, Objects: []keyspace.Object{obj}, Mailbox: w.srcMBs[i], Report: w.srcRs[i]})
	}
	tgt := &BulkTarget{Self: w.tgt, Node: w.tgtNode, Peer: bulkPipe{b}, Draining: func() bool { return false }, Stop: w.stopTgt, Intents: w.store,
		Stage: func(ev relocation.PrepareEvent, send func(*pb.RelocationFrame)) *BulkStage {
			m := relocation.NewTarget(relocation.TargetConfig{Self: w.tgt, SelfRoutingID: w.tgtRID, AppVersion: "v1",
				FallbackMs: w.fallback.Milliseconds(), MaxDeadlineMs: time.Minute.Milliseconds()})
			first, err := m.Step(ev)
			if err != nil {
				t.Errorf("target: PREPARE: %v", err)
			}
			name := ev.Prepare.GetParticipants()[0].GetObject()
			mb, r := &fakeTargetMailbox{}, newRecorder()
			w.mu.Lock()
			w.tgtMBs[name], w.tgtRs[name] = mb, r
			w.mu.Unlock()
			return &BulkStage{Machine: m, First: first, Store: w.store, Mailbox: mb, Report: r, Ended: func() {}}
		}}
	var wg sync.WaitGroup
	wg.Go(func() {
		defer b.Close() // the handler returned: the stream ends
		tgt.Run(w.tgtCtx)
	})
	ctx, cancel := context.WithDeadline(w.srcCtx, now.Add(w.timeout+5*time.Second))
	defer cancel()
	src.Run(ctx)
	wg.Wait()
}

// snapshots are the objects' records as they are now.
func (w *bulkWorld) snapshots() []record.Snapshot {
	var seen []record.Snapshot
	for _, o := range w.objs {
		seen = append(seen, w.store.get(o))
	}
	return seen
}

// staleAlone checks that stale aborted alone (stale_fence, its mailbox
// told history, its record the source's) and every other object moved.
func (w *bulkWorld) staleAlone(t *testing.T, stale keyspace.Object, history ...string) {
	t.Helper()
	for i, o := range w.objs {
		got := w.srcRs[i].outcome()
		if o != stale {
			if got != relocation.Completed || w.store.get(o).Record.Owner != w.tgt {
				t.Errorf("%s: %v, owner %v", o, got, w.store.get(o).Record.Owner)
			}
			continue
		}
		if got != relocation.Aborted || w.srcRs[i].finish.Code != pb.Code_CODE_STALE_FENCE {
			t.Errorf("%s: %+v, want aborted stale_fence", o, w.srcRs[i].finish)
		}
		if h := w.srcMBs[i].history(); fmt.Sprint(h) != fmt.Sprint(history) {
			t.Errorf("%s: mailbox %v, want %v", o, h, history)
		}
		if rec := w.store.get(o).Record; rec.Owner != w.src {
			t.Errorf("%s moved: %+v", o, rec)
		}
	}
}

// A bulk move of 16 actors: each its own relocation, each committed to the
// target with its own state, in one run per side.
func TestBulkMovesEach(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newBulkWorld(t, 16)
		seen := w.snapshots()
		w.run(t, seen)
		for i, o := range w.objs {
			if got := w.srcRs[i].outcome(); got != relocation.Completed {
				t.Errorf("%s: source %v (%+v)", o, got, w.srcRs[i].finish)
			}
			r := w.store.get(o).Record
			if r.Owner != w.tgt || r.AuthorityGeneration != 2 || r.Intent != nil {
				t.Errorf("%s: record %+v", o, r)
			}
			mb := w.tgtMBs[o.String()]
			if mb == nil || mb.admitted == nil || string(mb.restored) == "" {
				t.Errorf("%s: target mailbox %+v", o, mb)
			}
			if h := w.srcMBs[i].history(); h[len(h)-1] != "drop" {
				t.Errorf("%s: source mailbox %v", o, h)
			}
		}
	})
}

// A listed bulk run writes one listing for the run, naming its source,
// target and size, and takes it back when it ends; none of its units
// asks for a relocations/<id> of its own. An unlisted run's units do.
func TestBulkListedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newBulkWorld(t, 6)
		w.listed = true
		seen := w.snapshots()
		var during []authority.BulkListing
		w.store.onCommit = func() {
			if l, ok := w.store.listings["bulk-1"]; ok && len(during) == 0 {
				during = append(during, l)
			}
		}
		w.run(t, seen)
		if len(during) != 1 || during[0].Source != w.src || during[0].Target != w.tgt || during[0].Objects != 6 {
			t.Fatalf("listing while committing: %+v", during)
		}
		if len(w.store.listings) != 0 || len(w.store.unlisted) != 1 || w.store.listedIntents != 0 {
			t.Fatalf("after the run: listings %v, unlisted %v, intents with keys of their own %d",
				w.store.listings, w.store.unlisted, w.store.listedIntents)
		}
		for i, o := range w.objs {
			if got := w.srcRs[i].outcome(); got != relocation.Completed {
				t.Errorf("%s: %v", o, got)
			}
		}
		u := newBulkWorld(t, 2)
		u.run(t, []record.Snapshot{u.store.get(u.objs[0]), u.store.get(u.objs[1])})
		if u.store.listedIntents != 2 || len(u.store.unlisted) != 0 {
			t.Fatalf("unlisted run: %d intents with keys, unlisted %v", u.store.listedIntents, u.store.unlisted)
		}
	})
}

// One object whose record changed after it was planned fails its intent's
// compare: it aborts alone (stale_fence, never sealed), the others move.
func TestBulkStaleAbortsAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newBulkWorld(t, 8)
		seen := w.snapshots()
		stale := w.objs[3]
		r := w.store.get(stale).Record
		w.store.put(stale, r) // a newer store version than the plan's
		w.run(t, seen)
		w.staleAlone(t, stale) // never sealed
	})
}
