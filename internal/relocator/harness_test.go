package relocator

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// world is one relocation of one actor between two nodes, everything in
// memory: the store (memStore), the stream (Pipe), both mailboxes and
// reporters. Tests run it under testing/synctest: the clock is virtual.
type world struct {
	store            *memStore
	obj              keyspace.Object
	src, tgt         record.OwnerRef
	srcNode, tgtNode record.NodeRef
	srcRID, tgtRID   wire.RoutingID

	srcMB *fakeSourceMailbox
	tgtMB *fakeTargetMailbox
	srcR  *recorder
	tgtR  *recorder

	timeout  time.Duration
	precopy  int // SourceConfig.PrecopyMinBytes
	fallback time.Duration
	// srcPeer and tgtPeer wrap each side's end of the stream (faults).
	srcPeer, tgtPeer func(Peer) Peer
	// stopSrc, stopTgt: closed to stop a side (its node stopping).
	stopSrc, stopTgt chan struct{}
	// killTgt, killSrc: cancel a side's context (the node going away).
	tgtCtx, srcCtx       context.Context
	killTgt, killSrc     context.CancelFunc
	sourceM              *relocation.Source
	targetM              *relocation.Target
	srcStopped, tgtEnded chan struct{}
}

func newWorld(t *testing.T) *world {
	w := &world{
		store:  newMemStore(),
		obj:    keyspace.Object{Kind: keyspace.KindActor, Type: "counter", ID: "c1"},
		src:    record.OwnerRef{ID: "n1", Generation: 10},
		tgt:    record.OwnerRef{ID: "n2", Generation: 20},
		srcRID: wire.NewRoutingID(), tgtRID: wire.NewRoutingID(),
		srcMB:    &fakeSourceMailbox{payload: [][]byte{[]byte("state-"), []byte("of-c1")}},
		tgtMB:    &fakeTargetMailbox{},
		srcR:     newRecorder(),
		tgtR:     newRecorder(),
		timeout:  2 * time.Second,
		fallback: 500 * time.Millisecond,
		stopSrc:  make(chan struct{}),
		stopTgt:  make(chan struct{}),
	}
	w.srcNode = record.NodeRef{RoutingID: w.srcRID.Hex(), Address: "n1:1"}
	w.tgtNode = record.NodeRef{RoutingID: w.tgtRID.Hex(), Address: "n2:1"}
	w.store.setOwner(w.src, true)
	w.store.setOwner(w.tgt, true)
	w.store.create(w.obj, record.Record{Kind: w.obj.Kind, Type: w.obj.Type, ObjectGeneration: 1, AuthorityGeneration: 1,
		Owner: w.src, Node: w.srcNode, State: record.StateActive})
	w.srcCtx, w.killSrc = context.WithCancel(context.Background())
	w.tgtCtx, w.killTgt = context.WithCancel(context.Background())
	return w
}

// run relocates the actor and returns when both sides ended.
func (w *world) run(t *testing.T) {
	t.Helper()
	a, b := Pipe()
	if w.srcPeer != nil {
		a = w.srcPeer(a)
	}
	if w.tgtPeer != nil {
		b = w.tgtPeer(b)
	}
	now := time.Now()
	w.sourceM = relocation.NewSource(relocation.SourceConfig{
		ID: wire.NewRelocationID(), Object: w.store.get(w.obj), Self: w.src, SelfRoutingID: w.srcRID,
		Target:     relocation.TargetRef{Owner: w.tgt, Node: w.tgtNode},
		AppVersion: "v1", DeadlineMs: now.Add(w.timeout).UnixMilli(), ChunkSize: 4, Nonce: wire.NewNonce(),
		PrecopyMinBytes: w.precopy, StateBytes: w.precopy,
	})
	w.targetM = relocation.NewTarget(relocation.TargetConfig{Self: w.tgt, SelfRoutingID: w.tgtRID, AppVersion: "v1",
		FallbackMs: w.fallback.Milliseconds(), MaxDeadlineMs: time.Minute.Milliseconds()})
	var wg sync.WaitGroup
	w.tgtEnded = make(chan struct{})
	wg.Go(func() {
		defer close(w.tgtEnded)
		defer b.Close() // the handler returned: the stream ends
		f, err := b.Recv()
		if err != nil || f.GetPrepare() == nil {
			return
		}
		first, err := w.targetM.Step(relocation.PrepareEvent{Prepare: f.GetPrepare(), NowMs: time.Now().UnixMilli()})
		if err != nil {
			t.Errorf("target: first PREPARE: %v", err)
			return
		}
		tr := &Target{Machine: w.targetM, Self: w.tgt, Node: w.tgtNode, Store: w.store, Peer: b, Mailbox: w.tgtMB,
			Report: w.tgtR, Draining: func() bool { return false }, Stop: w.stopTgt}
		tr.Run(w.tgtCtx, first)
	})
	ctx, cancel := context.WithDeadline(w.srcCtx, now.Add(w.timeout+5*time.Second))
	defer cancel()
	s := &Source{Machine: w.sourceM, Self: w.src, Objects: []keyspace.Object{w.obj}, Store: w.store, Peer: a,
		Mailbox: w.srcMB, Watch: w.store, Report: w.srcR, Stop: w.stopSrc,
		Budget: func(context.Context, int64) (func(), error) { return func() {}, nil }}
	s.Run(ctx)
	wg.Wait()
}

// recorder is a Reporter that keeps what it heard.
type recorder struct {
	mu       sync.Mutex
	phases   []string
	finish   *relocation.Finish
	admitted time.Time
	sealed   time.Time
	chunks   int
	failed   []error
	steps    []string // the Timeline's, consecutive repeats folded
}

// Enter makes the recorder a Timeline too.
func (r *recorder) Enter(step string, _ time.Time) {
	r.mu.Lock()
	if n := len(r.steps); n == 0 || r.steps[n-1] != step {
		r.steps = append(r.steps, step)
	}
	r.mu.Unlock()
}

func newRecorder() *recorder { return &recorder{} }

func (r *recorder) Phase(p string) { r.mu.Lock(); r.phases = append(r.phases, p); r.mu.Unlock() }
func (r *recorder) Sealed(at time.Time, _ int) {
	r.mu.Lock()
	r.sealed = at
	r.mu.Unlock()
}
func (r *recorder) Chunk(int) { r.mu.Lock(); r.chunks++; r.mu.Unlock() }
func (r *recorder) Admitted(at time.Time) {
	r.mu.Lock()
	r.admitted = at
	r.mu.Unlock()
}
func (r *recorder) Finished(f relocation.Finish) {
	r.mu.Lock()
	if r.finish != nil {
		panic("finished twice")
	}
	r.finish = &f
	r.mu.Unlock()
}
func (r *recorder) Failed(err error) { r.mu.Lock(); r.failed = append(r.failed, err); r.mu.Unlock() }

func (r *recorder) outcome() relocation.Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finish == nil {
		return 0
	}
	return r.finish.Outcome
}

// fakeSourceMailbox records the calls a source run made.
type fakeSourceMailbox struct {
	mu       sync.Mutex
	payload  [][]byte
	base     [][]byte // Snapshot: a pre-copy base (nil: payload)
	sealErr  error
	sealWait time.Duration // Seal waits this long first (a long handler)
	boundary []*pb.CallRequest
	calls    []string
	reopened *relocation.Reopen
	dropped  *relocation.Drop
	failed   pb.Code
}

func (m *fakeSourceMailbox) note(c string) { m.mu.Lock(); m.calls = append(m.calls, c); m.mu.Unlock() }

func (m *fakeSourceMailbox) Seal(context.Context, relocation.Seal) ([][]byte, error) {
	m.note("seal")
	time.Sleep(m.sealWait) // virtual time: the tests run in synctest bubbles
	return m.payload, m.sealErr
}

func (m *fakeSourceMailbox) Snapshot(context.Context, relocation.Snapshot) ([][]byte, error) {
	m.note("snapshot")
	if m.base != nil {
		return m.base, nil
	}
	return m.payload, nil
}

func (m *fakeSourceMailbox) Boundary() []*pb.CallRequest {
	m.note("boundary")
	return m.boundary
}

func (m *fakeSourceMailbox) Reopen(a relocation.Reopen) {
	m.note("reopen")
	m.mu.Lock()
	m.reopened = &a
	m.mu.Unlock()
}

func (m *fakeSourceMailbox) Drop(a relocation.Drop) {
	m.note("drop")
	m.mu.Lock()
	m.dropped = &a
	m.mu.Unlock()
}

func (m *fakeSourceMailbox) Fail(code pb.Code, _ string) {
	m.note("fail")
	m.mu.Lock()
	m.failed = code
	m.mu.Unlock()
}

func (m *fakeSourceMailbox) history() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.calls...)
}

// fakeTargetMailbox records what a target stage restored and admitted.
type fakeTargetMailbox struct {
	mu         sync.Mutex
	restored   []byte
	restoreErr error
	// restoreWait, when set, blocks Restore until it is closed (a slow or
	// paused target).
	restoreWait chan struct{}
	admitted    *relocation.Admit
	discarded   bool
}

func (m *fakeTargetMailbox) Restore(p []byte) error {
	if m.restoreWait != nil {
		<-m.restoreWait
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.restored = append([]byte(nil), p...)
	return m.restoreErr
}

func (m *fakeTargetMailbox) Admit(a relocation.Admit) {
	m.mu.Lock()
	m.admitted = &a
	m.mu.Unlock()
}

func (m *fakeTargetMailbox) Discard() {
	m.mu.Lock()
	m.discarded = true
	m.mu.Unlock()
}

// faultPeer wraps a Peer: send sees (and may replace or swallow) every
// frame sent; a nil frame from it swallows.
type faultPeer struct {
	Peer
	send func(*pb.RelocationFrame) *pb.RelocationFrame
}

func (p *faultPeer) Send(f *pb.RelocationFrame) error {
	if f = p.send(f); f == nil {
		return nil
	}
	return p.Peer.Send(f)
}
