package relocator

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// DefaultTick is the longest a run's machine goes without a Tick; it gets
// the Ticks it asks for (WakeAtMs) on time.
const DefaultTick = 100 * time.Millisecond

// Source is one source relocation: the machine, its seams, and what the
// driver needs to carry out its actions. The caller opens Peer before Run
// (so the seal is not spent dialing) and owns nothing of it afterwards.
type Source struct {
	Machine *relocation.Source
	// Self is the source owner; LeaseID its lease, which relocations/<id>
	// is bound to.
	Self    record.OwnerRef
	LeaseID clientv3.LeaseID
	// Unlisted: no relocations/<id> (a unit of a listed bulk run).
	Unlisted bool
	// Objects are the participants, the primary first: the settle read
	// covers them.
	Objects []keyspace.Object

	Store   Store
	Peer    Peer
	Mailbox SourceMailbox
	Watch   Watch
	Report  Reporter
	Clock   clock.Clock
	// Budget takes n bytes of the chunk byte budgets (the node's and the
	// target's), waiting until they are free; release gives them back.
	Budget func(ctx context.Context, n int64) (release func(), err error)
	// OnReady, when set, is called once READY passed (an Actor Join answers
	// its caller then).
	OnReady func()
	// Stop, closed when the node stops: the machine ends as soon as it
	// safely can.
	Stop <-chan struct{}
	// Tick: how often the machine gets a Tick (0: DefaultTick).
	Tick time.Duration
}

// Run carries out the relocation until the machine finishes, ctx ends
// (a Stop), or nothing is left to wait for. Every etcd request and the
// stream live within ctx: the caller bounds it by the relocation's
// deadline plus the settle. It closes Peer and waits for every goroutine
// it started before it returns.
func (s *Source) Run(ctx context.Context) {
	// Reads in flight when the machine finished are abandoned, not awaited:
	// their result could change nothing.
	actx, abandon := context.WithCancel(ctx)
	x := &sourceExec{s: s, ctx: ctx, async: actx}
	l := &loop{clock: s.clock(), tick: s.tick(), report: s.Report, exec: x.do,
		phase: func() string { return s.Machine.Phase().String() }}
	x.now = func(f func() relocation.Event) []relocation.Event { return one(f()) }
	x.later, x.end = l.spawn, func() { l.done = true }
	l.queue.init()
	var recv sync.WaitGroup
	recv.Go(func() { receive(s.Peer, &l.queue) })
	defer func() {
		s.Peer.Close()
		abandon()
		recv.Wait()
		l.async.Wait()
	}()
	primary := s.Objects[0]
	var seen int64
	l.run(s.Machine, s.Machine.Start(), inputs{
		tick:    func(now time.Time) relocation.Event { return relocation.Tick{NowMs: now.UnixMilli()} },
		stop:    s.Stop,
		ctxDone: ctx.Done(),
		wake: func() <-chan struct{} {
			if !s.Machine.Watching() {
				return nil
			}
			return s.Watch.Changed()
		},
		look: func() []relocation.Event {
			loc, ok := s.Watch.Lookup(primary)
			if !ok || loc.StoreVersion == seen {
				return nil
			}
			seen = loc.StoreVersion
			return []relocation.Event{relocation.Observed{Location: loc}}
		},
	})
}

func (s *Source) clock() clock.Clock {
	if s.Clock == nil {
		return clock.Real()
	}
	return s.Clock
}

func (s *Source) tick() time.Duration {
	if s.Tick <= 0 {
		return DefaultTick
	}
	return s.Tick
}

// receive delivers the peer's frames until the stream ends.
func receive(p Peer, q *queue[relocation.Event]) {
	for {
		f, err := p.Recv()
		if err != nil {
			q.push(relocation.StreamBroken{Err: err})
			return
		}
		q.push(relocation.Received{Frame: f})
	}
}

// sourceExec carries out a source machine's actions: of a run of its own
// (Source.Run), or of one unit of a bulk run (BulkSource).
type sourceExec struct {
	s      *Source
	ctx    context.Context
	async  context.Context // of the spawned reads: ends with the run
	sealed bool            // for the timeline: STATE before the seal is a pre-copy's
	// now carries out an etcd write whose result the machine waits for:
	// at once, its event returned (a run of its own), or in a goroutine
	// of a bulk run's, which batches it with its other units' writes (the
	// event comes through the run's queue). later runs a read in a
	// goroutine of the run's; end is the machine's Finish.
	now   func(func() relocation.Event) []relocation.Event
	later func(func() relocation.Event)
	end   func()
	// seal, when set, hears each Seal carried out; await takes a bulk
	// unit's AwaitBulkIntent (a bulk run writes its key: bulk_intent.go).
	seal  func()
	await func(relocation.AwaitBulkIntent)
}

func (x *sourceExec) do(a relocation.Action) []relocation.Event {
	s, ctx := x.s, x.ctx
	switch a := a.(type) {
	case relocation.WriteIntent:
		enter(s.Report, s.clock(), "intent")
		return x.now(func() relocation.Event {
			res, err := s.Store.Intend(ctx, authority.IntentRequest{Seen: a.Seen, Members: a.Members, Source: s.Self, Intent: a.Intent, LeaseID: s.LeaseID, Unlisted: s.Unlisted})
			return relocation.IntentResult{Result: writeResult(res), Err: err}
		})
	case relocation.Seal:
		// Through now: a bulk run seals its units side by side, so one
		// whose handler is still running holds up no other.
		x.sealed = true
		enter(s.Report, s.clock(), "seal")
		if x.seal != nil {
			x.seal()
		}
		return x.now(func() relocation.Event {
			at := s.clock().Now()
			segs, err := s.Mailbox.Seal(ctx, a)
			size := 0
			for _, sg := range segs {
				size += len(sg)
			}
			s.Report.Sealed(at, size)
			return relocation.Captured{Segments: segs, Err: err, SealedUnixUs: at.UnixMicro()}
		})
	case relocation.AwaitBulkIntent:
		enter(s.Report, s.clock(), "intent")
		if x.await == nil {
			return one(relocation.BulkIntentResult{Err: errNoBulkRun})
		}
		x.await(a)
	case relocation.Snapshot:
		enter(s.Report, s.clock(), "precopy")
		segs, err := s.Mailbox.Snapshot(ctx, a)
		return one(relocation.Snapshotted{Segments: segs, Err: err})
	case relocation.Send:
		if err := s.Peer.Send(a.Frame); err != nil {
			return sendBroken(err)
		}
	case relocation.StreamChunks:
		if x.sealed {
			enter(s.Report, s.clock(), "state")
		}
		if err := x.streamChunks(a.Segments, a.Manifest, a.Only); err != nil {
			return sendBroken(err)
		}
		if x.sealed {
			enter(s.Report, s.clock(), "ready")
		}
	case relocation.SendBoundary:
		enter(s.Report, s.clock(), "cutover")
		n := x.sendBoundary()
		enter(s.Report, s.clock(), "commit")
		return one(relocation.BoundarySent{Count: n})
	case relocation.ReadSettle:
		x.later(func() relocation.Event {
			v, err := s.Store.ReadMany(x.async, s.Objects, []string{s.Self.ID})
			return relocation.SettleResult{View: v, Err: err}
		})
	case relocation.ReadyPassed:
		if s.OnReady != nil {
			s.OnReady()
		}
	case relocation.Admitted:
		s.Report.Admitted(s.clock().Now())
		enter(s.Report, s.clock(), "settle")
	case relocation.Preserve:
		enter(s.Report, s.clock(), "preserve")
		return x.now(func() relocation.Event {
			res, err := s.Store.Preserve(ctx, authority.PreserveRequest{Seen: a.Seen, Members: a.Members, Source: s.Self, RelocationID: s.Machine.ID().String()})
			return relocation.PreserveResult{Result: writeResult(res), Err: err}
		})
	case relocation.Reopen:
		s.Mailbox.Reopen(a)
	case relocation.Drop:
		s.Mailbox.Drop(a)
	case relocation.FailPending:
		s.Mailbox.Fail(a.Code, a.Message)
	case relocation.Finish:
		x.end()
		enter(s.Report, s.clock(), "done")
		s.Report.Finished(a)
	}
	return nil
}

// errNoBulkRun: a bulk unit's machine run on a stream of its own, where
// no bulk's key is written.
var errNoBulkRun = errors.New("relocator: a bulk unit runs only in a bulk run")

func one(ev relocation.Event) []relocation.Event { return []relocation.Event{ev} }

func writeResult(w authority.WriteResult) relocation.WriteResult {
	return relocation.WriteResult{Written: w.Written, Found: w.Found, OwnerAlive: w.OwnerAlive, Snapshot: w.Snapshot, Members: w.Members}
}

// sendBroken is the event of a failed Send. io.EOF means the target ended
// the stream: what it said last (a FAILED frame, e.g. ShuttingDown) and the
// stream's status come through Recv, which reports them (StreamBroken after
// the frames); reporting the break here could overtake the target's reason.
func sendBroken(err error) []relocation.Event {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return one(relocation.StreamBroken{Err: err})
}

// streamChunks sends the payload's chunks (only those listed, when only is
// not nil) as STATE chunks, each under the byte budgets.
func (x *sourceExec) streamChunks(segs [][]byte, m relocation.Manifest, only []uint32) error {
	s := x.s
	id := s.Machine.ID()
	n := int(m.Chunks)
	if only != nil {
		n = len(only)
	}
	for k := range n {
		i := uint32(k)
		if only != nil {
			i = only[k]
		}
		start, end := m.ChunkSpan(i)
		size := int64(end - start)
		release, err := s.Budget(x.ctx, size)
		if err != nil {
			return err
		}
		// A chunk inside one segment is a slice of it; one across segments
		// is copied into a buffer of its own, never reused: gRPC sends a
		// chunk's data after Send returns, without a copy, and a slice of
		// a segment must never be written into (it is the sealed state).
		c := &pb.StateChunk{RelocationId: id[:], Index: i, Data: relocation.Gather(segs, start, end, nil)}
		if int(i) < len(m.ChunkCRCs) {
			c.Crc32C = proto.Uint32(m.ChunkCRCs[i])
		}
		err = s.Peer.Send(&pb.RelocationFrame{Frame: &pb.RelocationFrame_Chunk{Chunk: c}})
		release()
		if err != nil {
			return err
		}
		s.Report.Chunk(int(size))
	}
	return nil
}

// sendBoundary sends the requests kept since the seal as DATA, then
// CUTOVER with their count and CRC32C; it returns how many DATA frames
// went out.
func (x *sourceExec) sendBoundary() int {
	s := x.s
	id := s.Machine.ID()
	reqs := s.Mailbox.Boundary()
	var crc uint32
	for i, req := range reqs {
		crc = wire.UpdateCRC32C(crc, relocation.RequestBytes(req))
		if err := s.Peer.Send(&pb.RelocationFrame{Frame: &pb.RelocationFrame_Data{Data: &pb.Data{RelocationId: id[:], Sequence: uint32(i), Request: req}}}); err != nil {
			return i // the target's fallback, or the deadline, decides
		}
	}
	_ = s.Peer.Send(&pb.RelocationFrame{Frame: &pb.RelocationFrame_Cutover{Cutover: &pb.Cutover{RelocationId: id[:], DataCount: uint32(len(reqs)), DataCrc32C: crc}}})
	return len(reqs)
}
