package relocator

import (
	"io"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Bulk moves: many relocations between one source and one target on one
// stream, driven by one goroutine on each side (BulkSource, BulkTarget).
// Each relocation is its own machine — its own id, nonce, fences, intent,
// commit and outcome — exactly as on a stream of its own; a bulk run only
// carries out their actions together. Their frames leave in few stream
// messages (BulkPeer: a batch of frames per message), and their etcd writes
// are issued at once, so a batched store (authority.Store.Batched) shares
// etcd requests among them, each still its own nested transaction with its
// own compares and result. Nothing of one relocation depends on another:
// one whose compare fails aborts alone, the others go on.
//
// The run decides nothing: which machine gets which event follows from the
// relocation id a frame or a result carries, and when a batch leaves
// follows from the machines having nothing more to do now.

// BulkPeer is a bulk stream: batches of frames, in order, both ways. The
// frames of one relocation keep their order within and across batches.
type BulkPeer interface {
	Send(frames []*pb.RelocationFrame) error
	// Recv blocks for the next batch; an error ends the stream.
	Recv() ([]*pb.RelocationFrame, error)
	// Close ends the stream from this side (a Recv blocked on it returns).
	Close()
}

// unit is one relocation of a bulk run: its machine, the actions it
// returned and not yet carried out, and its executor.
type unit struct {
	id      wire.RelocationID
	m       machine
	exec    func(relocation.Action) []relocation.Event
	pending []relocation.Action
	done    bool // its Finish was carried out
	marked  bool // in the run's ready list
	// looked: the cache's change channel when a bulk source last looked
	// its primary up (the same channel: nothing changed since).
	looked <-chan struct{}
}

// tagged is an event for one unit (or, with a zero id and a frame, a frame
// whose relocation the run looks up).
type tagged struct {
	id    wire.RelocationID
	ev    relocation.Event
	frame *pb.RelocationFrame // a received frame, routed by its id
	bulk  *relocation.BulkKey // a bulk target's read of a bulk's key
}

// multi is the machinery both sides of a bulk run share: the units, the
// ones with actions to carry out, and the events the run's goroutines
// deliver.
type multi struct {
	clock clock.Clock
	tick  time.Duration
	units map[wire.RelocationID]*unit
	order []*unit // every unit added, in order (ticks, watches)
	ready []*unit
	live  int // units not done
	queue queue[tagged]
	async sync.WaitGroup
	// refused hears a step a machine refused (a peer's protocol error).
	refused func(u *unit, err error)
}

func newMulti(c clock.Clock, tick time.Duration, refused func(*unit, error)) *multi {
	if c == nil {
		c = clock.Real()
	}
	if tick <= 0 {
		tick = DefaultTick
	}
	l := &multi{clock: c, tick: tick, units: map[wire.RelocationID]*unit{}, refused: refused}
	l.queue.init()
	return l
}

// add makes u a unit of the run, with its first actions.
func (l *multi) add(u *unit, first []relocation.Action) {
	l.units[u.id] = u
	l.order = append(l.order, u)
	l.live++
	u.pending = append(u.pending, first...)
	l.mark(u)
}

func (l *multi) mark(u *unit) {
	if !u.marked && len(u.pending) > 0 {
		u.marked = true
		l.ready = append(l.ready, u)
	}
}

// step gives u one event; its actions wait for runReady.
func (l *multi) step(u *unit, ev relocation.Event) {
	if u.done {
		return // a late event of a relocation that ended: its machine ignores it anyway
	}
	out, err := u.m.Step(ev)
	if err != nil && l.refused != nil {
		l.refused(u, err)
	}
	if len(out) > 0 {
		u.pending = append(u.pending, out...)
		l.mark(u)
	}
}

// finish marks u done (its Finish was carried out).
func (l *multi) finish(u *unit) {
	if !u.done {
		u.done = true
		l.live--
	}
}

// runReady carries out every pending action of every unit, in each unit's
// order; the events an action gives at once go to its unit before its
// next action.
func (l *multi) runReady() {
	for len(l.ready) > 0 {
		u := l.ready[0]
		l.ready[0] = nil
		l.ready = l.ready[1:]
		u.marked = false
		for len(u.pending) > 0 {
			a := u.pending[0]
			u.pending[0] = nil
			u.pending = u.pending[1:]
			for _, ev := range u.exec(a) {
				out, err := u.m.Step(ev)
				if err != nil && l.refused != nil {
					l.refused(u, err)
				}
				u.pending = append(u.pending, out...)
			}
		}
		u.pending = nil
	}
	l.ready = nil
}

// spawn runs f in a goroutine of the run's and delivers its event to u: an
// etcd request that many units issue at once, so the store batches them.
func (l *multi) spawn(u *unit, f func() relocation.Event) {
	l.async.Add(1)
	go func() {
		defer l.async.Done()
		l.queue.push(tagged{id: u.id, ev: f()})
	}()
}

// tickAll gives every live unit a Tick.
func (l *multi) tickAll(ev relocation.Event) {
	for _, u := range l.order {
		l.step(u, ev)
	}
}

// stepAll gives every live unit ev.
func (l *multi) stepAll(ev relocation.Event) { l.tickAll(ev) }

// nextWake is how long until a unit's machine wants a Tick (at most the
// run's tick).
func (l *multi) nextWake() time.Duration {
	next := l.tick
	now := l.clock.Now()
	for _, u := range l.order {
		if u.done {
			continue
		}
		if w := u.m.WakeAtMs(); w > 0 {
			next = min(next, max(time.UnixMilli(w).Sub(now), 0))
		}
	}
	return next
}

// compact forgets the units that ended, once they are most of the list:
// a long run does not tick and scan its ended relocations forever.
func (l *multi) compact() {
	if l.live*2 >= len(l.order) || len(l.order) < 64 {
		return
	}
	kept := l.order[:0]
	for _, u := range l.order {
		if !u.done {
			kept = append(kept, u)
		}
	}
	clear(l.order[len(kept):])
	l.order = kept
}

// frameID is the relocation id a frame names (zero when it names none a
// run can use).
func frameID(f *pb.RelocationFrame) wire.RelocationID {
	var b []byte
	switch x := f.GetFrame().(type) {
	case *pb.RelocationFrame_Prepare:
		b = x.Prepare.GetRelocationId()
	case *pb.RelocationFrame_Chunk:
		b = x.Chunk.GetRelocationId()
	case *pb.RelocationFrame_Ready:
		b = x.Ready.GetRelocationId()
	case *pb.RelocationFrame_Failed:
		b = x.Failed.GetRelocationId()
	case *pb.RelocationFrame_Data:
		b = x.Data.GetRelocationId()
	case *pb.RelocationFrame_Cutover:
		b = x.Cutover.GetRelocationId()
	case *pb.RelocationFrame_Outcome:
		b = x.Outcome.GetRelocationId()
	case *pb.RelocationFrame_Precopied:
		b = x.Precopied.GetRelocationId()
	case *pb.RelocationFrame_Sealed:
		b = x.Sealed.GetRelocationId()
	}
	id, err := wire.ParseRelocationIDBytes(b)
	if err != nil {
		return wire.RelocationID{}
	}
	return id
}

// Outbox collects what a bulk run's units send, for the run to send in
// batches. Its Peer is every unit's stream (or what a unit's own seam
// wraps around it).
type Outbox struct{ frames []*pb.RelocationFrame }

// Peer is the stream a unit sends on: what it sends waits in the box; it
// receives through the run, never through Recv.
func (o *Outbox) Peer() Peer { return (*outboxPeer)(o) }

func (o *Outbox) take() []*pb.RelocationFrame {
	fs := o.frames
	o.frames = nil
	return fs
}

type outboxPeer Outbox

func (p *outboxPeer) Send(f *pb.RelocationFrame) error {
	p.frames = append(p.frames, f)
	return nil
}
func (p *outboxPeer) Recv() (*pb.RelocationFrame, error) { return nil, io.EOF }
func (p *outboxPeer) Close()                             {}

// receiveBulk delivers the peer's frames, each tagged for routing, until
// the stream ends (then one tagged StreamBroken with a zero id).
func receiveBulk(p BulkPeer, q *queue[tagged]) {
	for {
		fs, err := p.Recv()
		if err != nil {
			q.push(tagged{ev: relocation.StreamBroken{Err: err}})
			return
		}
		for _, f := range fs {
			q.push(tagged{frame: f})
		}
	}
}

// batches cuts frames into stream messages of about max bytes (a frame
// larger than max goes alone), calling send for each; it stops at the
// first error.
func batches(frames []*pb.RelocationFrame, max int, send func([]*pb.RelocationFrame, int) error) error {
	start, size := 0, 0
	for i, f := range frames {
		n := frameSize(f)
		if i > start && size+n > max {
			if err := send(frames[start:i], size); err != nil {
				return err
			}
			start, size = i, 0
		}
		size += n
	}
	if start < len(frames) {
		return send(frames[start:], size)
	}
	return nil
}

// frameSize is about the bytes of f on the wire.
func frameSize(f *pb.RelocationFrame) int {
	if c := f.GetChunk(); c != nil {
		return len(c.GetData()) + 64 // its data is nearly all of it
	}
	return proto.Size(f) + 8
}
