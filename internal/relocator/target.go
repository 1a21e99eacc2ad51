package relocator

import (
	"context"
	"time"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/relocation"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// DefaultOpTimeout bounds each etcd request of a target (a commit, its
// read-back, a group read): an unanswered one is uncertain, and the
// machine asks again.
const DefaultOpTimeout = 5 * time.Second

// Target is one target stage: the machine, which already took the stream's
// first PREPARE, and its seams.
type Target struct {
	Machine *relocation.Target
	// Self and Node: this node, which the commit names.
	Self record.OwnerRef
	Node record.NodeRef

	Store   Store
	Peer    Peer
	Mailbox TargetMailbox
	Report  Reporter
	Clock   clock.Clock
	// Draining reports whether the node drains (every Tick and PREPARE
	// carries it).
	Draining func() bool
	// Stop, closed when the node stops.
	Stop <-chan struct{}
	// Tick (0: DefaultTick) and OpTimeout (0: DefaultOpTimeout).
	Tick      time.Duration
	OpTimeout time.Duration
}

// Run carries out the stage from the actions first (the machine's answer
// to the first PREPARE) until the machine finishes. ctx is the node's
// life: when it ends the machine is told to give up (Stop{Hard}); the
// stream ending is an event like any other, since a target must resolve
// a commit it started even when its source is gone. The receive goroutine
// is the one goroutine Run does not wait for: a gRPC server stream's Recv
// returns only once its handler returned.
func (t *Target) Run(ctx context.Context, first []relocation.Action) {
	x := &targetExec{t: t, ctx: ctx}
	l := &loop{clock: t.clock(), tick: t.Tick, report: t.Report, exec: x.do,
		phase: func() string { return t.Machine.Phase().String() }}
	if l.tick <= 0 {
		l.tick = DefaultTick
	}
	x.now = func(f func() relocation.Event) []relocation.Event { return one(f()) }
	x.end = func() { l.done = true }
	l.queue.init()
	defer l.async.Wait()
	enter(t.Report, t.clock(), "state")
	go t.receive(&l.queue)
	l.run(t.Machine, first, inputs{
		tick: func(now time.Time) relocation.Event {
			return relocation.Tick{NowMs: now.UnixMilli(), Draining: t.Draining()}
		},
		stop:    t.Stop,
		ctxDone: ctx.Done(),
	})
}

func (t *Target) clock() clock.Clock {
	if t.Clock == nil {
		return clock.Real()
	}
	return t.Clock
}

// receive delivers frames; a repeated PREPARE carries the node's facts of
// its arrival.
func (t *Target) receive(q *queue[relocation.Event]) {
	for {
		f, err := t.Peer.Recv()
		if err != nil {
			q.push(relocation.StreamBroken{Err: err})
			return
		}
		if p := f.GetPrepare(); p != nil {
			q.push(relocation.PrepareEvent{Prepare: p, NowMs: t.clock().Now().UnixMilli(), Draining: t.Draining()})
			continue
		}
		q.push(relocation.Received{Frame: f})
	}
}

// targetExec carries out a target machine's actions: of a run of its own
// (Target.Run), or of one unit of a bulk run (BulkTarget).
type targetExec struct {
	t   *Target
	ctx context.Context
	// now carries out an etcd request whose result the machine waits for
	// (sourceExec.now); end is the machine's Finish.
	now func(func() relocation.Event) []relocation.Event
	end func()
}

func (x *targetExec) op() (context.Context, context.CancelFunc) {
	d := x.t.OpTimeout
	if d <= 0 {
		d = DefaultOpTimeout
	}
	return context.WithTimeout(x.ctx, d)
}

func (x *targetExec) do(a relocation.Action) []relocation.Event {
	t := x.t
	switch a := a.(type) {
	case relocation.Send:
		_ = t.Peer.Send(a.Frame) // a broken stream shows up as StreamBroken from Recv
		if a.Frame.GetReady() != nil {
			enter(t.Report, t.clock(), "cutover")
		}
	case relocation.Restore:
		enter(t.Report, t.clock(), "ready")
		err := t.Mailbox.Restore(a.Payload)
		// The restore took time: the machine decides READY on the clock and
		// drain state of now, not of before it.
		return []relocation.Event{relocation.Tick{NowMs: t.clock().Now().UnixMilli(), Draining: t.Draining()}, relocation.Restored{Err: err}}
	case relocation.ReadGroup:
		return x.now(func() relocation.Event {
			ctx, cancel := x.op()
			defer cancel()
			s, err := t.Store.Read(ctx, a.Group)
			return relocation.GroupRead{Snapshot: s, Err: err}
		})
	case relocation.Commit:
		enter(t.Report, t.clock(), "commit")
		return x.now(func() relocation.Event {
			return x.commit(a.RelocationID.String(), a.Participants, a.Join, a.Bulk, false)
		})
	case relocation.ResolveCommit:
		return x.now(func() relocation.Event {
			return x.commit(a.RelocationID.String(), a.Participants, a.Join, a.Bulk, true)
		})
	case relocation.Admit:
		enter(t.Report, t.clock(), "admission")
		t.Mailbox.Admit(a)
		t.Report.Admitted(t.clock().Now())
		enter(t.Report, t.clock(), "settle")
	case relocation.Discard:
		t.Mailbox.Discard()
	case relocation.Recycle:
		if r, ok := t.Peer.(Recycler); ok {
			for _, d := range a.Data {
				r.Recycle(d)
			}
		}
	case relocation.Finish:
		x.end()
		enter(t.Report, t.clock(), "done")
		t.Report.Finished(a)
	}
	return nil
}

func (x *targetExec) commit(id string, ps []record.Snapshot, join *record.Snapshot, bulk *relocation.BulkRef, resolve bool) relocation.Event {
	t := x.t
	req := authority.CommitRequest{RelocationID: id, Target: t.Self, TargetNode: t.Node}
	for _, p := range ps {
		req.Participants = append(req.Participants, authority.Participant{Expected: p})
	}
	if join != nil {
		req.Join = &authority.JoinCommit{Group: *join}
	}
	if bulk != nil {
		req.Bulk = &authority.BulkFence{ID: bulk.ID, Revision: bulk.Revision}
	}
	ctx, cancel := x.op()
	defer cancel()
	var res authority.CommitResult
	var err error
	if resolve {
		res, err = t.Store.ResolveCommit(ctx, req)
	} else {
		res, err = t.Store.Commit(ctx, req)
	}
	if err != nil {
		return relocation.CommitResult{Err: err}
	}
	return relocation.CommitResult{Committed: res.Committed, Records: res.Records}
}

// Refuse answers a PREPARE the node refused before staging anything (a
// bound reached, a duplicate stage): the machine's answer goes back, and
// nothing else happens.
func Refuse(m *relocation.Target, ev relocation.PrepareEvent, send func(*pb.RelocationFrame) error) {
	acts, _ := m.Step(ev)
	for _, a := range acts {
		if s, ok := a.(relocation.Send); ok {
			_ = send(s.Frame)
		}
	}
}
