package relocator

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/relocation"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The driver's tests: both sides of one relocation on the in-memory Peer,
// on virtual time (testing/synctest): deadlines of seconds pass in
// microseconds of real time, and a test ends only when every goroutine
// the runs started ended.

func request(n int) *pb.CallRequest {
	return &pb.CallRequest{Object: "actor/counter/c1", Method: "add", OperationId: make([]byte, 16), Args: [][]byte{{byte(n)}}}
}

func (w *world) owner(t *testing.T) record.Record {
	t.Helper()
	return w.store.get(w.obj).Record
}

func (w *world) expect(t *testing.T, src, tgt relocation.Outcome) {
	t.Helper()
	if got := w.srcR.outcome(); got != src {
		t.Errorf("source outcome %s, want %s (%+v)", got, src, w.srcR.finish)
	}
	if got := w.tgtR.outcome(); got != tgt {
		t.Errorf("target outcome %s, want %s (%+v)", got, tgt, w.tgtR.finish)
	}
}

func TestHappyPath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		w.srcMB.boundary = []*pb.CallRequest{request(1), request(2)}
		start := time.Now()
		w.run(t)
		w.expect(t, relocation.Completed, relocation.Completed)
		if r := w.owner(t); r.Owner != w.tgt || r.State != record.StateActive || r.AuthorityGeneration != 2 || r.ObjectGeneration != 1 {
			t.Fatalf("record after the move: %+v", r)
		}
		if got := w.srcMB.history(); !slices.Equal(got, []string{"seal", "boundary", "drop"}) {
			t.Errorf("source mailbox calls %v", got)
		}
		if got := string(w.tgtMB.restored); got != "state-of-c1" {
			t.Errorf("target restored %q", got)
		}
		if a := w.tgtMB.admitted; a == nil || len(a.Data) != 2 || !proto.Equal(a.Data[1], request(2)) {
			t.Errorf("target admitted %+v", a)
		}
		if d := w.srcMB.dropped; d == nil || d.DataApplied != 2 || d.Committed.Owner != w.tgt {
			t.Errorf("source dropped %+v", d)
		}
		// The commit was observed through the watch (the cache), and the
		// OUTCOME came with it: the source never read etcd to settle.
		if w.store.settleReads != 0 {
			t.Errorf("%d settle reads, want none", w.store.settleReads)
		}
		if w.srcR.admitted.IsZero() || w.tgtR.admitted.IsZero() || w.srcR.chunks != 3 {
			t.Errorf("reports: source admitted %v, target admitted %v, %d chunks", w.srcR.admitted, w.tgtR.admitted, w.srcR.chunks)
		}
		// The timeline of both sides (the eager cutover is off here).
		if want := []string{"intent", "seal", "state", "ready", "cutover", "commit", "settle", "done"}; !slices.Equal(w.srcR.steps, want) {
			t.Errorf("source timeline %v, want %v", w.srcR.steps, want)
		}
		if want := []string{"state", "ready", "cutover", "commit", "admission", "settle", "done"}; !slices.Equal(w.tgtR.steps, want) {
			t.Errorf("target timeline %v, want %v", w.tgtR.steps, want)
		}
		// Nothing waited for a timer: no fallback, no deadline.
		if d := time.Since(start); d >= w.fallback {
			t.Errorf("the happy path took %s of virtual time", d)
		}
	})
}

// A pre-copy: the base streams, then only the chunk that changed since.
func TestPrecopy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		w.precopy = 8
		w.srcMB.base = [][]byte{[]byte("state-of-c0")}
		w.srcMB.boundary = []*pb.CallRequest{request(1)}
		var sent []string
		w.srcPeer = func(p Peer) Peer { return &spyPeer{Peer: p, sent: &sent} }
		w.run(t)
		w.expect(t, relocation.Completed, relocation.Completed)
		if got := w.srcMB.history(); !slices.Equal(got, []string{"snapshot", "seal", "boundary", "drop"}) {
			t.Errorf("source mailbox calls %v", got)
		}
		if got := string(w.tgtMB.restored); got != "state-of-c1" {
			t.Errorf("target restored %q", got)
		}
		want := []string{"PREPARE", "STATE 0", "STATE 1", "STATE 2", "SEALED", "STATE 2", "DATA", "CUTOVER"}
		if !slices.Equal(sent, want) {
			t.Errorf("source sent %v, want %v", sent, want)
		}
		if want := []string{"intent", "precopy", "seal", "state", "ready", "cutover", "commit", "settle", "done"}; !slices.Equal(w.srcR.steps, want) {
			t.Errorf("source timeline %v, want %v", w.srcR.steps, want)
		}
	})
}

// spyPeer records the kinds of the frames sent (and chunk indexes).
type spyPeer struct {
	Peer
	sent *[]string
}

func (p *spyPeer) Send(f *pb.RelocationFrame) error {
	name := "?"
	switch x := f.GetFrame().(type) {
	case *pb.RelocationFrame_Prepare:
		name = "PREPARE"
	case *pb.RelocationFrame_Chunk:
		name = fmt.Sprintf("STATE %d", x.Chunk.GetIndex())
	case *pb.RelocationFrame_Sealed:
		name = "SEALED"
	case *pb.RelocationFrame_Data:
		name = "DATA"
	case *pb.RelocationFrame_Cutover:
		name = "CUTOVER"
	}
	*p.sent = append(*p.sent, name)
	return p.Peer.Send(f)
}

func TestTargetRefusesAborts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		w.tgtMB.restoreErr = &relocation.RefusedError{Code: pb.Code_CODE_INVALID_ARGUMENT, Message: "no"}
		w.run(t)
		w.expect(t, relocation.Aborted, relocation.Failed)
		if r := w.owner(t); r.Owner != w.src || r.State != record.StateActive {
			t.Fatalf("record: %+v", r)
		}
		if got := w.srcMB.history(); !slices.Equal(got, []string{"seal", "reopen"}) {
			t.Errorf("source mailbox calls %v", got)
		}
		if !w.tgtMB.discarded {
			t.Error("target did not discard")
		}
	})
}

func TestCaptureFailsAborts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		w.srcMB.sealErr = errString("snapshot failed")
		w.run(t)
		if got := w.srcR.outcome(); got != relocation.Aborted {
			t.Fatalf("source outcome %s", got)
		}
		if r := w.owner(t); r.Owner != w.src || r.State != record.StateActive {
			t.Fatalf("record: %+v", r)
		}
	})
}

// A target killed (kill -9) after READY sends nothing more and never
// commits: the source preserves at its deadline and serves again.
func TestTargetKilledAfterReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		dead := false
		w.tgtPeer = func(p Peer) Peer {
			return &faultPeer{Peer: p, send: func(f *pb.RelocationFrame) *pb.RelocationFrame {
				if dead {
					return nil
				}
				if f.GetReady() != nil {
					dead = true
					_ = p.Send(f)
					w.killTgt()
					p.Close()
					return nil
				}
				return f
			}}
		}
		start := time.Now()
		w.run(t)
		w.expect(t, relocation.Aborted, relocation.Shutdown)
		if r := w.owner(t); r.Owner != w.src || r.State != record.StateActive {
			t.Fatalf("record: %+v", r)
		}
		if got := w.srcMB.history(); !slices.Equal(got, []string{"seal", "boundary", "reopen"}) {
			t.Errorf("source mailbox calls %v", got)
		}
		if d := time.Since(start); d < w.timeout {
			t.Errorf("preserved after %s, before the deadline", d)
		}
	})
}

// A source killed after READY sends no CUTOVER: the target commits after
// its fallback wait; the object lives on at the target.
func TestSourceKilledAfterReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		dead := false
		w.srcPeer = func(p Peer) Peer {
			return &faultPeer{Peer: p, send: func(f *pb.RelocationFrame) *pb.RelocationFrame {
				if f.GetData() != nil || f.GetCutover() != nil || dead {
					if !dead {
						dead = true
						w.killSrc()
						p.Close()
					}
					return nil
				}
				return f
			}}
		}
		w.srcMB.boundary = []*pb.CallRequest{request(1)}
		w.run(t)
		w.expect(t, relocation.Shutdown, relocation.Completed)
		if r := w.owner(t); r.Owner != w.tgt || r.State != record.StateActive {
			t.Fatalf("record: %+v", r)
		}
		if a := w.tgtMB.admitted; a == nil || len(a.Data) != 0 {
			t.Errorf("target admitted %+v", a)
		}
		if slices.Contains(w.srcMB.history(), "reopen") || slices.Contains(w.srcMB.history(), "drop") {
			t.Errorf("a killed source reopened or dropped: %v", w.srcMB.history())
		}
	})
}

// A chunk corrupted on the way fails the target's CRC32C: nothing is
// restored, the source preserves and serves again.
func TestChunkCorrupted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		w.srcPeer = func(p Peer) Peer {
			return &faultPeer{Peer: p, send: func(f *pb.RelocationFrame) *pb.RelocationFrame {
				if c := f.GetChunk(); c != nil && c.GetIndex() == 1 {
					c = proto.Clone(c).(*pb.StateChunk)
					c.Data[0] ^= 1
					return &pb.RelocationFrame{Frame: &pb.RelocationFrame_Chunk{Chunk: c}}
				}
				return f
			}}
		}
		w.run(t)
		w.expect(t, relocation.Aborted, relocation.Failed)
		if w.tgtMB.restored != nil {
			t.Errorf("a corrupted payload was restored: %q", w.tgtMB.restored)
		}
		if r := w.owner(t); r.Owner != w.src || r.State != record.StateActive {
			t.Fatalf("record: %+v", r)
		}
		if f := w.tgtR.finish; f == nil || f.Code != pb.Code_CODE_DATA_LOST {
			t.Errorf("target finish %+v", f)
		}
	})
}

// A commit whose reply was lost is read back: it landed, the target admits,
// and nothing is committed twice.
func TestCommitReplyLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		w.store.commitReplyLost = true
		w.run(t)
		w.expect(t, relocation.Completed, relocation.Completed)
		if w.store.commits != 1 {
			t.Errorf("%d commit transactions, want 1", w.store.commits)
		}
		if r := w.owner(t); r.Owner != w.tgt {
			t.Fatalf("record: %+v", r)
		}
	})
}

// A target that takes past the deadline to restore never sends READY in
// time: the source preserves at the deadline; the target's late READY is
// refused by its own clock.
func TestDeadlineBeforeReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		w.tgtMB.restoreWait = make(chan struct{})
		time.AfterFunc(w.timeout+time.Second, func() { close(w.tgtMB.restoreWait) })
		w.run(t)
		w.expect(t, relocation.Aborted, relocation.Failed)
		if f := w.srcR.finish; f == nil || f.Code != pb.Code_CODE_DEADLINE_EXCEEDED {
			t.Errorf("source finish %+v", f)
		}
		if r := w.owner(t); r.Owner != w.src || r.State != record.StateActive {
			t.Fatalf("record: %+v", r)
		}
	})
}

// The source's lease ends while the target is gone: the object is lost,
// its pending requests are failed.
func TestSourceLeaseLostFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		w.tgtPeer = func(p Peer) Peer {
			return &faultPeer{Peer: p, send: func(f *pb.RelocationFrame) *pb.RelocationFrame {
				if f.GetReady() != nil {
					_ = p.Send(f)
					w.store.setOwner(w.src, false) // the source's lease expired meanwhile
					w.killTgt()
					p.Close()
					return nil
				}
				return f
			}}
		}
		w.run(t)
		if got := w.srcR.outcome(); got != relocation.Failed {
			t.Fatalf("source outcome %s (%+v)", got, w.srcR.finish)
		}
		if w.srcMB.failed != pb.Code_CODE_UNAVAILABLE {
			t.Errorf("pending requests failed with %s", w.srcMB.failed)
		}
	})
}

// A node stopping while its relocation settles ends it as shutdown.
func TestStopWhileSettling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		w.tgtPeer = func(p Peer) Peer {
			return &faultPeer{Peer: p, send: func(f *pb.RelocationFrame) *pb.RelocationFrame {
				if f.GetReady() != nil {
					_ = p.Send(f)
					time.AfterFunc(100*time.Millisecond, func() { close(w.stopSrc) })
					w.killTgt()
					p.Close()
					return nil
				}
				return f
			}}
		}
		w.run(t)
		if got := w.srcR.outcome(); got != relocation.Shutdown {
			t.Fatalf("source outcome %s (%+v)", got, w.srcR.finish)
		}
	})
}

// A target stopping before the commit refuses; the source preserves.
func TestTargetStopsBeforeCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		w.srcPeer = func(p Peer) Peer {
			return &faultPeer{Peer: p, send: func(f *pb.RelocationFrame) *pb.RelocationFrame {
				if f.GetCutover() != nil {
					close(w.stopTgt)
					synctest.Wait() // the target saw its stop
				}
				return f
			}}
		}
		w.run(t)
		w.expect(t, relocation.Aborted, relocation.Shutdown)
		if r := w.owner(t); r.Owner != w.src || r.State != record.StateActive {
			t.Fatalf("record: %+v", r)
		}
	})
}

type errString string

func (e errString) Error() string { return string(e) }
