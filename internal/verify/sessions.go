package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Sessions is the sessions workload, on chat rooms (the builtin type room):
// each stream opens PerStream sessions on the rooms and says unique texts
// through them, one session at a time; a receiver per session records every
// message the room publishes to it. The relocation storm moves the rooms,
// faults kill their owners and the sessions' gateways. Checked (Check,
// sessions_check.go): in every session the room's messages arrive in the
// room's order, each once, without a gap; a message number means one text
// and a text one number in a room's life (a say executed twice, or by two
// owners, breaks that); every acknowledged say reaches every session bound
// to its room from before the say until the end; a session ends only when
// its room's state was lost (a new session is opened then).
type Sessions struct {
	Prefix string
	// Rooms (default 3) and sessions per stream (default 4).
	Rooms     int
	PerStream int
	Think     time.Duration
	// CatchUp bounds the wait, after the load, for the open sessions to
	// receive every say acknowledged by then (default 30 s).
	CatchUp time.Duration

	mu       sync.Mutex
	logs     []*sessionLog
	maxAcked map[roomLife]uint64
	setup    []string // why a stream could not run
}

// SessionOpener opens sessions; *client.Client is one. A stream's Caller
// must be one for the sessions workload.
type SessionOpener interface {
	OpenSession(ctx context.Context, object string) (*client.Session, error)
}

var _ SessionOpener = (*client.Client)(nil)

// roomLife is one life of a room: its object generation.
type roomLife struct {
	room string
	gen  int64
}

// received is one message a session got.
type received struct {
	N    uint64 `json:"n"`
	Text string `json:"text"`
	At   int64  `json:"-"`
}

// sessionLog is what one session saw.
type sessionLog struct {
	idx    int
	stream int
	room   string
	openAt int64

	mu       sync.Mutex
	notify   chan struct{} // a message came, or the session ended
	gen      int64         // the room life its replies name (0: no reply yet)
	pushes   []received
	endAt    int64 // 0: open until we closed it
	endCode  pb.Code
	endErr   string
	target   uint64 // the message it waited for at the end (0: none)
	gateways map[string]bool
	closing  bool
}

func (l *sessionLog) ended() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.endAt != 0
}

func (l *sessionLog) last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pushes) == 0 {
		return 0
	}
	return l.pushes[len(l.pushes)-1].N
}

func (l *sessionLog) sawGateway(gw string) {
	l.mu.Lock()
	l.gateways[gw] = true
	l.mu.Unlock()
}

func (l *sessionLog) signal() {
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

// Name implements Workload.
func (w *Sessions) Name() string { return "sessions" }

// Objects implements Workload.
func (w *Sessions) Objects() []string { return objectNames("room", w.Prefix+"r", max(w.Rooms, 1)) }

// FinalRead implements Workload.
func (w *Sessions) FinalRead() (string, []string) { return "history", nil }

func (w *Sessions) perStream() int {
	if w.PerStream <= 0 {
		return 4
	}
	return w.PerStream
}

func (w *Sessions) catchUp() time.Duration {
	if w.CatchUp <= 0 {
		return 30 * time.Second
	}
	return w.CatchUp
}

// live is one session a stream holds.
type live struct {
	log *sessionLog
	s   *client.Session
}

// Run implements Workload.
func (w *Sessions) Run(ctx context.Context, s Stream, h *History) {
	opener, ok := s.Caller.(SessionOpener)
	if !ok {
		w.mu.Lock()
		w.setup = append(w.setup, fmt.Sprintf("stream %d: the caller %T opens no sessions", s.ID, s.Caller))
		w.mu.Unlock()
		return
	}
	rng := newRand(s.ID)
	rooms := w.Objects()
	var receivers sync.WaitGroup
	defer receivers.Wait()
	held := make([]*live, w.perStream())
	defer func() {
		for _, l := range held {
			if l != nil {
				l.log.mu.Lock()
				l.log.closing = true
				l.log.mu.Unlock()
				l.s.Close()
			}
		}
	}()
	k := 0
	for ctx.Err() == nil {
		for i, l := range held {
			if l == nil || l.log.ended() {
				if l != nil {
					l.s.Close()
				}
				held[i] = w.open(ctx, opener, s, h, rooms[(s.ID+i)%len(rooms)], &receivers)
			}
		}
		l := held[rng.IntN(len(held))]
		if l == nil {
			pause(ctx, 100*time.Millisecond) // the cluster refused the open: it is healing
			continue
		}
		k++
		w.say(ctx, s, h, l, fmt.Sprintf("c%ds%d/%d", s.ID, l.log.idx, k))
		pause(ctx, w.Think)
	}
	w.waitCaughtUp(held)
}

// open opens a session on room and starts its receiver (nil: the open
// failed; the stream tries again later).
func (w *Sessions) open(ctx context.Context, opener SessionOpener, s Stream, h *History, room string, receivers *sync.WaitGroup) *live {
	octx, cancel := context.WithTimeout(ctx, s.opTimeout())
	sess, err := opener.OpenSession(octx, room)
	cancel()
	if err != nil {
		return nil
	}
	w.mu.Lock()
	log := &sessionLog{idx: len(w.logs), stream: s.ID, room: room, openAt: h.Now(), notify: make(chan struct{}, 1),
		gateways: map[string]bool{sess.Gateway(): true}}
	w.logs = append(w.logs, log)
	w.mu.Unlock()
	receivers.Go(func() { w.receive(h, log, sess) })
	return &live{log: log, s: sess}
}

// receive records the messages of one session until it ends.
func (w *Sessions) receive(h *History, log *sessionLog, sess *client.Session) {
	defer log.signal()
	for {
		p, err := sess.Recv(context.Background())
		now := h.Now()
		if err != nil {
			log.mu.Lock()
			closing := log.closing
			if !closing {
				log.endAt, log.endErr = now, err.Error()
				var we *wire.Error
				if errors.As(err, &we) {
					log.endCode = we.Code
				}
			}
			code := log.endCode
			log.mu.Unlock()
			if !closing && code == pb.Code_CODE_STATE_LOST {
				// The end declared the room's state lost, with its new
				// life's fence: the history records it like a reply.
				end := Op{Client: log.stream, Workload: w.Name(), Object: log.room, Kind: "end", Call: now, End: now,
					Outcome: Fail, Code: code, Err: err.Error()}
				if f, ok := sess.Fence(); ok {
					end.Fence = FenceOf(f)
				}
				end.Return = now
				h.Add(end)
			}
			return
		}
		var m received
		if err := json.Unmarshal(p.Payload, &m); err != nil {
			m = received{Text: fmt.Sprintf("undecodable push %q", p.Payload)}
		}
		m.At = now
		log.mu.Lock()
		log.pushes = append(log.pushes, m)
		log.gateways[sess.Gateway()] = true
		log.mu.Unlock()
		log.signal()
	}
}

// say says text through l and records the operation.
func (w *Sessions) say(ctx context.Context, s Stream, h *History, l *live, text string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opTimeout())
	defer cancel()
	rec := Op{Client: s.ID, Workload: w.Name(), Object: l.log.room, Kind: "say", Input: []string{text}}
	rec.Call = h.Now()
	rep, err := l.s.Call(cctx, "say", text)
	rec.End = h.Now()
	settle(&rec, rep, err)
	if rec.Outcome == Fail && fenced(rec.Code) {
		if f, ok := l.s.Fence(); ok {
			rec.Fence = FenceOf(f)
		}
	}
	rec.ID = h.Add(rec)
	l.log.sawGateway(l.s.Gateway())
	if rec.Outcome != OK {
		return
	}
	var r struct{ N uint64 }
	if json.Unmarshal(rep.Payload, &r) != nil {
		return // Check reports the reply
	}
	life := roomLife{l.log.room, rec.Fence.ObjectGeneration}
	l.log.mu.Lock()
	if l.log.gen == 0 {
		l.log.gen = life.gen
	}
	l.log.mu.Unlock()
	w.mu.Lock()
	if w.maxAcked == nil {
		w.maxAcked = map[roomLife]uint64{}
	}
	w.maxAcked[life] = max(w.maxAcked[life], r.N)
	w.mu.Unlock()
}

// waitCaughtUp waits, at most CatchUp, until every open session of held
// has the last message acknowledged in its room's life by now.
func (w *Sessions) waitCaughtUp(held []*live) {
	deadline := time.NewTimer(w.catchUp())
	defer deadline.Stop()
	for _, l := range held {
		if l == nil {
			continue
		}
		l.log.mu.Lock()
		life := roomLife{l.log.room, l.log.gen}
		l.log.mu.Unlock()
		if life.gen == 0 {
			continue
		}
		w.mu.Lock()
		target := w.maxAcked[life]
		w.mu.Unlock()
		l.log.mu.Lock()
		l.log.target = target
		l.log.mu.Unlock()
		for l.log.last() < target && !l.log.ended() {
			select {
			case <-l.log.notify:
			case <-deadline.C:
				return
			}
		}
	}
}
