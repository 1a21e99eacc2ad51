package relocator

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// DefaultBatchBytes is about the largest stream message a bulk run sends:
// frames are batched up to it (a larger frame goes alone).
const DefaultBatchBytes = 1 << 20

// BulkSource is the source side of a bulk move (bulk.go): one relocation
// per unit, all to one target over Peer. The caller opens Peer before Run.
type BulkSource struct {
	Units []BulkSourceUnit
	// Self is the source owner; LeaseID its lease (relocations/<id>).
	Self    record.OwnerRef
	LeaseID clientv3.LeaseID
	// Lister, when set, lists the run in etcd as relocations/<ID> (bound
	// to LeaseID) while it runs, going to Target, and its units write no
	// relocations/<id> of their own: one key per bulk, not per object.
	Lister Lister
	ID     string
	Target record.OwnerRef
	// Intents, when set, writes the bulk's key for its units under the
	// one-write rule (their machines are SourceConfig.BulkIntent ones):
	// once, for every unit captured, relocations/<ID>.<n>; deleted when
	// the run ends (bulk_intent.go). No listing is written then.
	Intents BulkIntents

	Store Store
	Peer  BulkPeer
	Watch Watch
	Clock clock.Clock
	// Budget takes n bytes of the chunk byte budgets for one stream
	// message, waiting for room (nil: none).
	Budget func(ctx context.Context, n int64) (release func(), err error)
	// MaxBatchBytes: about the largest stream message (0: DefaultBatchBytes).
	MaxBatchBytes int
	// Stop, closed when the node stops.
	Stop <-chan struct{}
	// Tick: how often every machine gets a Tick (0: DefaultTick).
	Tick time.Duration
	// Late hears a frame for no relocation of the run (nil: ignored).
	Late func(*pb.RelocationFrame)
	// Out collects what the units send (a unit's Peer is Out.Peer(), or a
	// seam around it).
	Out *Outbox

	reports map[*unit]Reporter
	keys    *bulkKeys
}

// BulkSourceUnit is one relocation of a bulk move.
type BulkSourceUnit struct {
	Machine *relocation.Source
	// Objects are its participants, the primary first (the settle read).
	Objects []keyspace.Object
	Mailbox SourceMailbox
	Report  Reporter
	// Store and Peer: the run's, or a seam of the node's around them
	// (nil: Store, Out.Peer()).
	Store Store
	Peer  Peer
}

// Run carries out every unit's relocation until each machine finished.
// ctx bounds every etcd request and the stream, as Source.Run's. It closes
// Peer and waits for every goroutine it started before it returns.
func (b *BulkSource) Run(ctx context.Context) {
	actx, abandon := context.WithCancel(ctx)
	l := newMulti(b.Clock, b.Tick, func(u *unit, err error) { b.report(u).Failed(err) })
	reports := make(map[*unit]Reporter, len(b.Units))
	primaries := make(map[*unit]string, len(b.Units))
	seen := make(map[*unit]int64, len(b.Units))
	if b.Out == nil {
		b.Out = &Outbox{}
	}
	var keys *bulkKeys
	if b.Intents != nil {
		keys = &bulkKeys{intents: b.Intents, self: b.Self, base: b.ID, written: map[string]int64{}}
	}
	for _, bu := range b.Units {
		u := &unit{id: bu.Machine.ID(), m: bu.Machine}
		peer, store := bu.Peer, bu.Store
		if peer == nil {
			peer = b.Out.Peer()
		}
		if store == nil {
			store = b.Store
		}
		s := &Source{Machine: bu.Machine, Self: b.Self, LeaseID: b.LeaseID, Unlisted: b.Lister != nil, Objects: bu.Objects, Store: store, Peer: peer,
			Mailbox: bu.Mailbox, Watch: b.Watch, Report: bu.Report, Clock: l.clock, Budget: noBudget}
		x := &sourceExec{s: s, ctx: ctx, async: actx,
			now:   func(f func() relocation.Event) []relocation.Event { l.spawn(u, f); return nil },
			later: func(f func() relocation.Event) { l.spawn(u, f) },
			end:   func() { l.finish(u) }}
		if keys != nil {
			x.seal = func() { keys.sealing++ }
			x.await = func(a relocation.AwaitBulkIntent) { keys.await(awaiting{u: u, a: a}, l.clock.Now()) }
		}
		u.exec = x.do
		reports[u], primaries[u] = bu.Report, bu.Objects[0].String()
		l.add(u, bu.Machine.Start())
	}
	b.reports, b.keys = reports, keys
	if b.Lister != nil && keys == nil {
		defer b.list(ctx, l.clock.Now())()
	}
	var stopped *relocation.Stop
	if keys != nil {
		// Deferred before the wait for the goroutines below, so it runs
		// after it (LIFO): every write of a key ended. A stopped run
		// leaves its keys to the sweep: a target may still commit what a
		// key names.
		defer func() {
			if stopped == nil {
				keys.deleteAll(ctx)
			}
		}()
	}
	var recv sync.WaitGroup
	recv.Go(func() { receiveBulk(b.Peer, &l.queue) })
	defer func() {
		b.Peer.Close()
		abandon()
		recv.Wait()
		l.async.Wait()
	}()
	timer := l.clock.NewTimer(l.tick)
	defer timer.Stop()
	stop, ctxDone := b.Stop, ctx.Done()
	broken := false
	for {
		l.runReady()
		if keys != nil && keys.ready(l.clock.Now()) {
			keys.write(ctx, l)
		}
		if err := b.flush(ctx, l); err != nil && !broken {
			broken = true
			l.stepAll(relocation.StreamBroken{Err: err})
			continue
		}
		if l.live == 0 {
			return
		}
		l.compact()
		// The cache's change channel first, then the look: a change
		// between them closes the channel, so none is missed.
		var wake <-chan struct{}
		if watching(l) {
			wake = b.Watch.Changed()
			if looked := b.look(l, wake, primaries, seen); looked {
				continue
			}
		}
		next := l.nextWake()
		if keys != nil {
			next = keys.wakeIn(l.clock.Now(), next) // a key that waited long enough for the seals
		}
		timer.Reset(next)
		select {
		case <-l.queue.ready:
			now := relocation.Tick{NowMs: l.clock.Now().UnixMilli()}
			for _, t := range l.queue.take() {
				b.deliver(l, t, now, &broken)
			}
		case now := <-timer.C():
			l.tickAll(relocation.Tick{NowMs: now.UnixMilli()})
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
		case <-wake:
		}
	}
}

// deliver gives one event of the run's queue to its unit: a frame by the
// relocation it names, a result by its unit, the stream's end to all.
// Each unit hears the time first (as a run of its own does).
func (b *BulkSource) deliver(l *multi, t tagged, now relocation.Tick, broken *bool) {
	switch {
	case t.frame != nil:
		u := l.units[frameID(t.frame)]
		if u == nil {
			if b.Late != nil {
				b.Late(t.frame)
			}
			return
		}
		l.step(u, now)
		l.step(u, relocation.Received{Frame: t.frame})
	case t.id == (wire.RelocationID{}):
		*broken = true
		l.stepAll(now)
		l.stepAll(t.ev)
	default:
		if _, ok := t.ev.(relocation.Captured); ok && b.keys != nil {
			b.keys.sealing-- // a seal's result: its unit asks for its key next
		}
		if u := l.units[t.id]; u != nil {
			l.step(u, now)
			l.step(u, t.ev)
		}
	}
}

// watching reports whether any unit wants the cache's changes.
func watching(l *multi) bool {
	for _, u := range l.order {
		if !u.done {
			if s, ok := u.m.(*relocation.Source); ok && s.Watching() {
				return true
			}
		}
	}
	return false
}

// look gives each watching unit its primary's record as the cache has it,
// when it changed; it reports whether any unit got one.
func (b *BulkSource) look(l *multi, changed <-chan struct{}, primaries map[*unit]string, seen map[*unit]int64) bool {
	got := false
	for _, u := range l.order {
		s, ok := u.m.(*relocation.Source)
		if u.done || !ok || !s.Watching() || u.looked == changed {
			continue
		}
		// Until changed closes, the cache holds what this look reads: the
		// loop comes round after every event, and a bulk's units would
		// otherwise be looked up again each time (quadratic in its size).
		u.looked = changed
		loc, ok := b.Watch.LookupName(primaries[u])
		if !ok || loc.StoreVersion == seen[u] {
			continue
		}
		seen[u] = loc.StoreVersion
		l.step(u, relocation.Observed{Location: loc})
		got = true
	}
	return got
}

// flush sends the frames the units sent, in stream messages of at most
// about MaxBatchBytes, each under the byte budgets. io.EOF means the
// target ended the stream: its last word comes through Recv.
func (b *BulkSource) flush(ctx context.Context, l *multi) error {
	frames := b.Out.take()
	if len(frames) == 0 {
		return nil
	}
	max := b.MaxBatchBytes
	if max <= 0 {
		max = DefaultBatchBytes
	}
	err := batches(frames, max, func(fs []*pb.RelocationFrame, size int) error {
		if b.Budget != nil {
			release, err := b.Budget(ctx, int64(size))
			if err != nil {
				return err
			}
			defer release()
		}
		return b.Peer.Send(fs)
	})
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

func (b *BulkSource) report(u *unit) Reporter { return b.reports[u] }

// noBudget is a unit's chunk budget in a bulk run: the run takes the
// budget for each stream message as a whole when it sends it.
func noBudget(context.Context, int64) (func(), error) { return func() {}, nil }

// list writes the run's relocations/<ID> and returns what deletes it. The
// key is for operators only: a failure to write or delete it (a stopping
// node's ctx; the lease deletes it with the source) does not hold up the move.
func (b *BulkSource) list(ctx context.Context, now time.Time) (unlist func()) {
	err := b.Lister.ListBulk(ctx, b.ID, authority.BulkListing{Source: b.Self, Target: b.Target, Objects: len(b.Units),
		StartedUnixMs: now.UnixMilli()}, b.LeaseID)
	if err != nil {
		return func() {}
	}
	return func() { _ = b.Lister.UnlistBulk(ctx, b.ID, b.Self) }
}
