package node

import (
	"errors"
	"fmt"
	"sync"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/session"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// hosted is one object owned and served by this node. Its instance is touched
// only by the single drain goroutine of its mailbox (one request at a time,
// FIFO); everything else goes through mu.
type hosted struct {
	n    *Node
	name string
	obj  keyspace.Object
	typ  *actor.Type // shared by every object of the type (Node.typeRef)

	ready     chan struct{} // closed when activation ended (closedReady after; h.mu)
	failReply *pb.CallReply // set before ready closes when activation failed
	lostGen   int64         // object generation that replaced a lost one (0: none)
	dur       *durableState // durable types only (durable.go); nil until known

	mu      sync.Mutex
	inst    actor.Object
	fence   authority.Fence
	version int64 // store version of the record the fence was taken from
	// rec is that record (served.go), when the fence was taken from a
	// snapshot (a later write of the node's own only raises version): a
	// relocation plans from it instead of reading etcd (recordOf).
	rec     servedRec
	replies *actor.ReplyTable
	timers  *actor.Timers
	timer   clock.Timer
	fireSet bool // a timer fire is queued or armed
	queue   []*work
	running bool
	closed  bool
	// stateBytes is the size of the object's last payload plus one (0:
	// not known yet): whether its next relocation pre-copies.
	stateBytes int32
	// lost: etcd named another owner (ownership.go); nothing more runs
	// here and no reply under this fence leaves.
	lost     bool
	executed uint64

	// Relocation (mailbox.go). mode says where a new request goes; only the
	// relocation actions on the mailbox change it.
	mode       hostMode
	relocating bool    // a source relocation of this object is running
	mv         *moving // the mailbox's relocation lists (nil: none; moving.go)
	// sessions bound to the object (session_owner.go).
	sessions map[session.ID]*boundSession
	// outbox: the messages the object sent, not yet answered (state, like
	// timers; messages.go); msgs: their delivery (nil until the first).
	outbox *actor.Outbox
	msgs   *outboxDelivery
}

// hostMode is what happens to a request submitted now.
type hostMode int

const (
	modeServing  hostMode = iota // queue and run
	modeBoundary                 // source, sealed before CUTOVER: keep in order
	modeHold                     // source, after CUTOVER: keep until the outcome
	modeHidden                   // target, restored, before its commit: wait
)

// work is one mailbox item: a request or a timer fire.
type work struct {
	req   *pb.CallRequest
	op    wire.OperationID
	done  chan *pb.CallReply // buffered 1; nil for a request relayed from a source
	timer bool
	// relay: where the reply goes when the request was captured elsewhere.
	relay *relayRoute
	// route: the reply route of this node's pending request while it runs
	// elsewhere (0: none); relayer: the owner id it was handed to, the only
	// node that may relay its reply (checked with mutual TLS).
	route   uint64
	relayer string
	// fn, when set, is not a request: the drain calls it between two
	// handlers (a pre-copy's snapshot, mailbox.go) and answers nil.
	fn func()
}

func newHosted(n *Node, obj keyspace.Object, typ actor.Type) *hosted {
	h := &hosted{n: n, name: obj.String(), typ: n.typeRef(typ), ready: make(chan struct{})}
	// obj's strings are the name's and the type's: the request whose
	// decoded strings made obj is not kept for the object's life.
	h.obj = keyspace.Object{Kind: keyspace.KindGroup, ID: h.name[len(h.name)-len(obj.ID):]}
	if obj.Kind != keyspace.KindGroup {
		h.obj.Kind, h.obj.Type = keyspace.KindActor, h.name[len(keyspace.KindActor)+1:][:len(obj.Type)]
		if obj.Type == h.typ.Name {
			h.obj.Type = h.typ.Name
		}
	}
	return h
}

// closedReady is the ready channel of every object whose activation ended:
// the one each object made is garbage once closed (96 bytes an object).
var closedReady = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// readyCh is closed when h's activation ended.
func (h *hosted) readyCh() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ready
}

// markReady ends h's activation (failReply, if any, set before).
func (h *hosted) markReady() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ready != closedReady {
		close(h.ready)
		h.ready = closedReady
	}
}

// typeRef is the one copy of t that the node's objects of its type point
// to (a copy in each of a million objects costs 64 MB).
func (n *Node) typeRef(t actor.Type) *actor.Type {
	if p, ok := n.types.Load(t.Name); ok {
		return p.(*actor.Type)
	}
	p, _ := n.types.LoadOrStore(t.Name, &t)
	return p.(*actor.Type)
}

// takeRecordLocked makes snap the record h serves under (h.mu held).
func (h *hosted) takeRecordLocked(snap authority.Snapshot) {
	h.fence, h.version = snap.Fence(), snap.StoreVersion
	h.rec = h.compactRecord(snap)
}

// install makes the instance live with the fence of snap (fresh state).
func (h *hosted) install(snap authority.Snapshot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inst = h.typ.New()
	h.takeRecordLocked(snap)
	h.replies = actor.NewReplyTable(h.n.cfg.DedupWindow, 0)
	h.timers = nil
}

// submit queues w; the reply arrives on w.done. It reports false when the
// object is no longer hosted here (the caller re-routes).
func (h *hosted) submit(w *work) bool {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return false
	}
	if w.timer && (h.mode == modeBoundary || h.mode == modeHold) {
		// A fire racing the seal: the timers travel in the payload (missed
		// ticks fire on the target) and reopen re-arms them after an abort.
		// Kept as boundary work it would be sent as a request without one.
		h.mu.Unlock()
		return false
	}
	if w.fn != nil && h.mode != modeServing {
		h.mu.Unlock()
		return false // only a serving object is snapshot live
	}
	switch h.mode {
	case modeBoundary:
		m := h.moving()
		m.boundary = append(m.boundary, w)
		h.mu.Unlock()
		return true
	case modeHold:
		m := h.moving()
		m.held = append(m.held, w)
		h.mu.Unlock()
		return true
	case modeHidden:
		m := h.moving()
		m.waiting = append(m.waiting, w)
		h.mu.Unlock()
		return true
	}
	h.queue = append(h.queue, w)
	start := !h.running
	h.running = true
	h.mu.Unlock()
	if start {
		h.startDrain()
	}
	return true
}

// startDrain runs the mailbox's drain on a goroutine of its own, counted in
// the node's work (drain ends the count).
func (h *hosted) startDrain() {
	h.n.work.Add(1)
	go h.drain()
}

// runInline executes w on the caller's goroutine when the object is idle
// (nothing running or queued): no goroutine or channel handoff on the common
// path. It reports false, having done nothing, when w must be queued.
func (h *hosted) runInline(w *work) (*pb.CallReply, bool) {
	h.mu.Lock()
	if h.closed || h.mode != modeServing || h.running || len(h.queue) > 0 {
		h.mu.Unlock()
		return nil, false
	}
	h.running = true
	h.mu.Unlock()
	h.n.work.Add(1)
	r := h.execute(w)
	h.mu.Lock()
	if !h.mv.sealing() && len(h.queue) == 0 && !h.closed {
		h.running = false
		h.mu.Unlock()
		h.n.work.Done()
		return r, true
	}
	h.mu.Unlock()
	// Something queued meanwhile, a seal waits or the object closed: a drain
	// takes over (it owns the work count taken above).
	go h.drain()
	return r, true
}

func (h *hosted) drain() {
	defer h.n.work.Done()
	for {
		h.mu.Lock()
		if h.mv.sealing() {
			// A seal is waiting for the handler in progress: stop here.
			h.running = false
			close(h.mv.sealWait)
			h.mv.sealWait = nil
			h.tidyLocked()
			h.mu.Unlock()
			return
		}
		if len(h.queue) == 0 || h.closed {
			q := h.queue
			h.queue = nil
			h.running = false
			closed := h.closed
			h.mu.Unlock()
			if closed {
				for _, w := range q {
					h.answer(w, h.n.notHere(h.obj))
				}
			}
			return
		}
		w := h.queue[0]
		h.queue[0] = nil
		h.queue = h.queue[1:]
		h.mu.Unlock()
		if w.timer {
			h.fireTimers()
			continue
		}
		if w.fn != nil {
			w.fn()
			h.answer(w, nil)
			continue
		}
		h.answer(w, h.execute(w))
	}
}

func (h *hosted) answer(w *work, r *pb.CallReply) {
	switch {
	case w.relay != nil:
		h.n.seams.relayReply(w, r)
	case w.done != nil:
		select {
		case w.done <- r:
		default: // answered already (a relay raced a local answer)
		}
	}
}

// close stops the object: queued requests are answered with a redirect.
// unhideLocked wakes whoever waits for h to leave hidden (h.mu held).
func (h *hosted) unhideLocked() {
	if h.mv != nil && h.mv.unhidden != nil {
		close(h.mv.unhidden)
		h.mv.unhidden = nil
		h.tidyLocked()
	}
}

func (h *hosted) close() {
	h.mu.Lock()
	h.closed = true
	h.unhideLocked()
	if h.timer != nil {
		h.timer.Stop()
	}
	h.stopDeliveryLocked()
	idle := !h.running
	q := h.queue
	if idle {
		h.queue = nil
	}
	var rest []*work
	if m := h.mv; m != nil {
		rest = append(append(append(m.captured, m.boundary...), m.held...), m.waiting...)
		m.captured, m.boundary, m.held, m.waiting = nil, nil, nil, nil
		h.tidyLocked()
	}
	h.mu.Unlock()
	if idle {
		for _, w := range q {
			h.answer(w, h.n.notHere(h.obj))
		}
	}
	for _, w := range rest {
		h.n.unroute(w)
		h.answer(w, h.n.notHere(h.obj))
	}
}

func (h *hosted) reply(code pb.Code, payload []byte, msg string) *pb.CallReply {
	h.mu.Lock()
	f, v := h.fence, h.version
	h.mu.Unlock()
	return &pb.CallReply{Code: code, Payload: payload, Message: msg, Fence: h.n.wireFence(f, v, h.n.selfNode.RoutingID)}
}

// execute runs one request on the drain goroutine.
func (h *hosted) execute(w *work) *pb.CallReply {
	n := h.n
	if h.isLost() {
		return n.notHere(h.obj)
	}
	now := n.now()
	if st := n.leaseStatus(now); st != lease.Valid {
		n.metrics.FencedRefusals.Inc()
		return h.reply(pb.Code_CODE_UNAVAILABLE, nil, "owner cannot confirm its lease ("+st.String()+"): not serving")
	}
	if k := knownGeneration(w.req); k != 0 && k < h.fence.ObjectGeneration && !h.typ.Durable {
		return h.reply(pb.Code_CODE_STATE_LOST, nil, fmt.Sprintf(
			"%s was re-created (object generation %d → %d): its state died with its owner; the request was not executed",
			h.name, k, h.fence.ObjectGeneration))
	}
	if h.typ.Durable {
		if r := h.ensureDurable(); r != nil {
			return r
		}
	}
	prev, dup, err := h.replies.Check(w.op, now)
	switch {
	case errors.Is(err, actor.ErrOperationExpired):
		return h.reply(pb.Code_CODE_OPERATION_EXPIRED, nil, err.Error())
	case err != nil:
		return h.reply(pb.Code_CODE_INVALID_OPERATION_ID, nil, err.Error())
	case dup:
		r := h.reply(pb.Code(prev.Code), prev.Payload, prev.Message)
		r.Replayed = true
		n.metrics.DedupHits.Inc()
		return r
	}
	var sess *boundSession
	if rs := w.req.GetSession(); rs != nil {
		h.mu.Lock()
		s, r := h.sessionOfLocked(rs, w.req.GetSessionSeq())
		h.mu.Unlock()
		if r != nil {
			return r
		}
		sess = s
	}
	if ms := w.req.GetSender(); ms != nil {
		if r := n.checkSender(ms); r != nil { // messages.go
			return r
		}
	}
	hc := &handlerCtx{h: h, now: now, session: sess, op: w.op}
	out, herr := h.handle(hc, w.req.GetMethod(), w.req.GetArgs())
	if h.typ.Durable && errors.Is(herr, actor.ErrPanicked) {
		// Its memory is suspect and etcd holds its last good state:
		// dropped, re-activated by the next call; nothing is recorded.
		h.dropDurable("its handler panicked")
		return h.reply(pb.Code_CODE_INTERNAL, nil, herr.Error()+"; the change was not persisted")
	}
	if herr == nil {
		herr = h.recordSends(hc.sends) // in this turn, before a durable persist (messages.go)
	}
	if errors.Is(herr, actor.ErrOutboxFull) {
		// Not recorded: a retry runs again once the outbox has room (a
		// refused request changed nothing: actor rule 4).
		return h.reply(pb.Code_CODE_RESOURCE_EXHAUSTED, nil, herr.Error())
	}
	rec := actor.Reply{Code: int32(pb.Code_CODE_OK), Payload: out}
	if herr != nil {
		rec = actor.Reply{Code: int32(actor.CodeOf(herr)), Message: herr.Error()}
	}
	if h.typ.Durable {
		// Persisted before it is recorded or acknowledged (durable.go).
		if r := h.persistChange(&w.op, rec, now); r != nil {
			return r
		}
	}
	h.replies.Record(w.op, rec, now)
	h.executed++
	if sess != nil || len(hc.pushes) > 0 {
		h.commitPushes(sess, w.req.GetSessionSeq(), hc.pushes)
	}
	if n.xlog != nil {
		n.xlog.Request(h.name, h.currentFence(), w.op, w.req.GetSender().GetObject(), now) // before the reply leaves
	}
	if herr == nil && len(hc.sends) > 0 {
		h.kickDelivery()
	}
	// Check again just before the reply leaves (docs/design.md §5).
	if st := n.leaseStatus(n.now()); st == lease.Expired || st == lease.Lost || st == lease.Closed {
		n.metrics.FencedRefusals.Inc()
		return h.reply(pb.Code_CODE_UNAVAILABLE, nil, "owner lost its lease before replying")
	}
	if h.isLost() { // etcd moved it away while the handler ran: no reply under our fence
		return n.notHere(h.obj)
	}
	return h.reply(pb.Code(rec.Code), rec.Payload, rec.Message)
}

func (h *hosted) isLost() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

// ---------------------------------------------------------------- timers

// arm schedules a timer fire for the earliest due timer.
func (h *hosted) arm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.timers == nil || h.fireSet {
		return
	}
	next, ok := h.timers.Next()
	if !ok {
		return
	}
	h.fireSet = true
	d := max(next.Sub(h.n.now()), 0)
	h.timer = h.n.clock.AfterFunc(d, func() {
		if !h.submit(&work{timer: true}) {
			h.mu.Lock()
			h.fireSet = false
			h.mu.Unlock()
		}
	})
}

func (h *hosted) fireTimers() {
	if h.typ.Durable && !h.durableTimerGate() {
		return
	}
	h.mu.Lock()
	h.fireSet = false
	var ticks []actor.Tick
	now := h.n.now()
	if h.timers != nil {
		ticks = h.timers.FireDue(now)
	}
	h.mu.Unlock()
	if st := h.n.leaseStatus(now); st != lease.Valid && st != lease.Unusable {
		return
	}
	if to, ok := h.inst.(actor.TimerObject); ok {
		for _, t := range ticks {
			hc := &handlerCtx{h: h, now: now, op: actor.TimerOperationID(h.name, t.Name, t.Index, now)}
			if err := h.guard("OnTimer("+t.Name+")", func() error { return to.OnTimer(hc, t) }); err != nil {
				h.n.log.Warn().Str("object", h.name).Str("timer", t.Name).Err(err).Msg("timer handler failed")
				hc.sends = nil
			}
			if err := h.recordSends(hc.sends); err != nil {
				h.n.log.Error().Str("object", h.name).Str("timer", t.Name).Err(err).Msg("a timer's messages could not be recorded")
			}
			if len(hc.pushes) > 0 {
				h.commitPushes(nil, 0, hc.pushes)
			}
			if h.n.xlog != nil {
				h.n.xlog.Timer(h.name, h.currentFence(), t.Name, now)
			}
		}
		if h.typ.Durable && len(ticks) > 0 {
			h.persistTimers(now)
		}
	}
	h.arm()
	h.kickDelivery()
}

// currentFence is h's fence now.
func (h *hosted) currentFence() authority.Fence {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fence
}
