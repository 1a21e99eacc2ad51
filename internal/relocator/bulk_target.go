package relocator

import (
	"context"
	"time"

	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// BulkTarget is the target side of a bulk move (bulk.go): a stage per
// relocation whose PREPARE arrives on Peer, each made by the node (Stage)
// and run as on a stream of its own.
type BulkTarget struct {
	// Self and Node: this node, which every commit names.
	Self record.OwnerRef
	Node record.NodeRef
	Peer BulkPeer
	// Stage is the node's answer to the PREPARE of a relocation the run
	// does not know: a stage to run (its machine has taken the PREPARE),
	// or nil when the node refused it before staging anything (its answer
	// then went out through send).
	Stage func(ev relocation.PrepareEvent, send func(*pb.RelocationFrame)) *BulkStage
	Clock clock.Clock
	// Draining reports whether the node drains (every Tick and PREPARE
	// carries it).
	Draining func() bool
	// Stop, closed when the node stops.
	Stop <-chan struct{}
	// Tick (0: DefaultTick), OpTimeout (0: DefaultOpTimeout) and
	// MaxBatchBytes (0: DefaultBatchBytes), as for a run of one.
	Tick          time.Duration
	OpTimeout     time.Duration
	MaxBatchBytes int
	// Late hears a frame for no stage of the run (nil: ignored).
	Late func(*pb.RelocationFrame)
	// Intents reads the bulk keys PREPAREs name (the one-write rule;
	// nil: such a PREPARE is refused as unreadable).
	Intents BulkIntents

	finished []*BulkStage // stages whose Finish was carried out, to end
	keys     bulkReads    // bulk_intent_target.go
}

// BulkStage is one relocation of a bulk move on its target.
type BulkStage struct {
	Machine *relocation.Target
	// First are the machine's actions for its PREPARE.
	First   []relocation.Action
	Store   Store
	Mailbox TargetMailbox
	Report  Reporter
	// Ended is called once its machine finished (the node's bookkeeping:
	// the stage's slot, its tombstone, its status).
	Ended func()
}

// Run runs every stage until the stream ended and every stage finished.
// ctx is the node's life (Target.Run's): when it ends every machine is
// told to give up. A stage whose source went away still resolves its
// commit before the run returns.
func (b *BulkTarget) Run(ctx context.Context) {
	l := newMulti(b.Clock, b.Tick, nil)
	stages := map[*unit]*BulkStage{}
	l.refused = func(u *unit, err error) { stages[u].Report.Failed(err) }
	box := &Outbox{}
	out := box.Peer()
	send := func(f *pb.RelocationFrame) { _ = out.Send(f) }
	defer l.async.Wait()
	go receiveBulk(b.Peer, &l.queue) // ends with the stream: the handler's return
	timer := l.clock.NewTimer(l.tick)
	defer timer.Stop()
	tick := func(now time.Time) relocation.Event {
		return relocation.Tick{NowMs: now.UnixMilli(), Draining: b.Draining()}
	}
	var stopped *relocation.Stop
	stop, ctxDone := b.Stop, ctx.Done()
	ended := false // the stream ended: no stage comes any more
	for {
		if len(b.keys.held) > 0 && len(b.keys.reading) == 0 {
			// Every key is read: the frames held for it go on, in order.
			held := b.keys.held
			b.keys.held = nil
			now := l.clock.Now()
			for _, f := range held {
				b.routeHeld(ctx, l, stages, out, send, f, now, ended)
			}
		}
		l.runReady()
		for _, st := range b.finished {
			st.Ended() // after its Finish was reported, as a run of one's handler does
		}
		b.finished = nil
		b.flush(box)
		if ended && l.live == 0 && len(b.keys.reading) == 0 {
			return
		}
		l.compact()
		timer.Reset(l.nextWake())
		select {
		case <-l.queue.ready:
			now := l.clock.Now()
			for _, t := range l.queue.take() {
				switch {
				case t.bulk != nil:
					b.keys.got(t.bulk)
				case t.frame != nil:
					b.frame(ctx, l, stages, out, send, t.frame, now)
				case t.id == (wire.RelocationID{}):
					ended = true
					l.stepAll(tick(now))
					l.stepAll(t.ev)
				default:
					if u := l.units[t.id]; u != nil {
						l.step(u, tick(now))
						l.step(u, t.ev)
					}
				}
			}
		case now := <-timer.C():
			l.tickAll(tick(now))
			if stopped != nil {
				l.stepAll(*stopped)
			}
		case <-stop:
			stop = nil
			if stopped == nil {
				stopped = &relocation.Stop{}
			}
			l.stepAll(*stopped)
		case <-ctxDone:
			ctxDone = nil
			stopped = &relocation.Stop{Hard: true}
			l.stepAll(*stopped)
		}
	}
}

// frame routes one received frame: to its stage, a new stage for the
// PREPARE of a relocation the run does not know, or Late.
func (b *BulkTarget) frame(ctx context.Context, l *multi, stages map[*unit]*BulkStage, out Peer, send func(*pb.RelocationFrame), f *pb.RelocationFrame, now time.Time) {
	id := frameID(f)
	u := l.units[id]
	p := f.GetPrepare()
	var key *relocation.BulkKey
	if u == nil && b.keys.hold(ctx, l, b.Intents, f, b.OpTimeout) {
		return // its bulk's key, or another's, is being read
	}
	if u == nil && p != nil {
		key = b.keys.key(p.GetBulkId())
	}
	switch {
	case u != nil && p != nil:
		l.step(u, relocation.Tick{NowMs: now.UnixMilli(), Draining: b.Draining()})
		l.step(u, relocation.PrepareEvent{Prepare: p, NowMs: now.UnixMilli(), Draining: b.Draining()})
	case u != nil:
		l.step(u, relocation.Tick{NowMs: now.UnixMilli(), Draining: b.Draining()})
		l.step(u, relocation.Received{Frame: f})
	case p != nil && id != (wire.RelocationID{}):
		st := b.Stage(relocation.PrepareEvent{Prepare: p, NowMs: now.UnixMilli(), Draining: b.Draining(), Bulk: key}, send)
		if st == nil {
			return
		}
		u = &unit{id: id, m: st.Machine}
		t := &Target{Machine: st.Machine, Self: b.Self, Node: b.Node, Store: st.Store, Peer: out, Mailbox: st.Mailbox,
			Report: st.Report, Clock: l.clock, Draining: b.Draining, Stop: b.Stop, OpTimeout: b.OpTimeout}
		x := &targetExec{t: t, ctx: ctx,
			now: func(f func() relocation.Event) []relocation.Event { l.spawn(u, f); return nil },
			end: func() {
				l.finish(u)
				delete(stages, u)
				b.finished = append(b.finished, st)
			}}
		u.exec = x.do
		stages[u] = st
		enter(st.Report, l.clock, "state")
		l.add(u, st.First)
	default:
		if b.Late != nil {
			b.Late(f)
		}
	}
}

// flush sends what the stages sent, in stream messages of at most about
// MaxBatchBytes; a broken stream shows as the end of Recv.
func (b *BulkTarget) flush(box *Outbox) {
	frames := box.take()
	if len(frames) == 0 {
		return
	}
	max := b.MaxBatchBytes
	if max <= 0 {
		max = DefaultBatchBytes
	}
	_ = batches(frames, max, func(fs []*pb.RelocationFrame, _ int) error { return b.Peer.Send(fs) })
}
