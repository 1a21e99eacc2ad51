package hosted

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/reminder"
	"github.com/meshloc/meshloc/pkg/session"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// hosted is one object owned and served by this node. Its instance is touched
// only by the single drain goroutine of its mailbox (one request at a time,
// FIFO); everything else goes through mu.
type Object struct {
	env  *Env
	name string
	obj  keyspace.Object
	Typ  *actor.Type // shared by every object of the type (Node.typeRef)

	Ready     chan struct{} // closed when activation ended (closedReady after; h.Mu)
	FailReply *pb.CallReply // set before ready closes when activation failed
	LostGen   int64         // object generation that replaced a lost one (0: none)
	Dur       *durableState // durable types only (durable.go); nil until known
	// traced is the span of the request executing, when it is traced
	// (trace.go); only its executing goroutine touches it.
	traced context.Context

	Mu      sync.Mutex
	Inst    actor.Object
	Fence   authority.Fence
	Version int64 // store version of the record the fence was taken from
	// rec is that record (served.go), when the fence was taken from a
	// snapshot (a later write of the node's own only raises version): a
	// relocation plans from it instead of reading etcd (recordOf).
	Rec     servedRec
	Replies *actor.ReplyTable
	Timers  *actor.Timers
	Rem     []reminder.Def // durable reminders (reminders.go)
	timer   clock.Timer
	fireSet bool // a timer fire is queued or armed
	Queue   []*Work
	Running bool
	Closed  bool
	// stateBytes is the size of the object's last payload plus one (0:
	// not known yet): whether its next relocation pre-copies.
	stateBytes int32
	// lost: etcd named another owner (ownership.go); nothing more runs
	// here and no reply under this fence leaves.
	Lost     bool
	Executed uint64
	// used: when the object last ran a request (unix ns; sleep.go).
	used atomic.Int64

	// Relocation (mailbox.go). mode says where a new request goes; only the
	// relocation actions on the mailbox change it.
	Mode       Mode
	Relocating bool    // a source relocation of this object is running
	Sleeping   bool    // with Relocating: it is going to sleep (sleep.go)
	Ending     bool    // with Relocating: it is being deleted (delete.go)
	Mv         *Moving // the mailbox's relocation lists (nil: none; moving.go)
	// sessions bound to the object (session_owner.go).
	Sessions map[session.ID]*BoundSession
	// outbox: the messages the object sent, not yet answered (state, like
	// timers; messages.go); msgs: their delivery (nil until the first).
	Outbox *actor.Outbox
	msgs   *outboxDelivery
}

// New is the object obj of type typ (the node's one copy of it), not yet
// activated, hosted in env.
func New(env *Env, obj keyspace.Object, typ *actor.Type) *Object {
	h := &Object{env: env, name: obj.String(), Typ: typ, Ready: make(chan struct{})}
	// obj's strings are the name's and the type's: the request whose
	// decoded strings made obj is not kept for the object's life.
	h.obj = keyspace.Object{Kind: keyspace.KindGroup, ID: h.name[len(h.name)-len(obj.ID):]}
	if obj.Kind != keyspace.KindGroup {
		h.obj.Kind, h.obj.Type = keyspace.KindActor, h.name[len(keyspace.KindActor)+1:][:len(obj.Type)]
		if obj.Type == h.Typ.Name {
			h.obj.Type = h.Typ.Name
		}
	}
	return h
}

// closedReady is the ready channel of every object whose activation ended:
// the one each object made is garbage once closed (96 bytes an object).
var closedReady = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// ReadyCh is closed when h's activation ended.
func (h *Object) ReadyCh() <-chan struct{} {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	return h.Ready
}

// MarkReady ends h's activation (failReply, if any, set before).
func (h *Object) MarkReady() {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	if h.Ready != closedReady {
		close(h.Ready)
		h.Ready = closedReady
	}
}

// TakeRecordLocked makes snap the record h serves under (h.Mu held).
func (h *Object) TakeRecordLocked(snap authority.Snapshot) {
	h.Fence, h.Version = snap.Fence(), snap.StoreVersion
	h.Rec = h.CompactRecord(snap)
}

// Install makes the instance live with the fence of snap (fresh state).
func (h *Object) Install(snap authority.Snapshot) {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	h.Inst = h.Typ.New()
	h.TakeRecordLocked(snap)
	h.Replies = actor.NewReplyTable(h.env.cfg.DedupWindow, 0)
	h.Timers = nil
	h.Used(h.env.now())
}

// Submit queues w; the reply arrives on w.done. It reports false when the
// object is no longer hosted here (the caller re-routes).
func (h *Object) Submit(w *Work) bool {
	h.Mu.Lock()
	if h.Closed {
		h.Mu.Unlock()
		return false
	}
	if w.Timer && (h.Mode == ModeBoundary || h.Mode == ModeHold) {
		// A fire racing the seal: the timers travel in the payload (missed
		// ticks fire on the target) and reopen re-arms them after an abort.
		// Kept as boundary work it would be sent as a request without one.
		h.Mu.Unlock()
		return false
	}
	if w.Fn != nil && h.Mode != ModeServing {
		h.Mu.Unlock()
		return false // only a serving object is snapshot live
	}
	switch h.Mode {
	case ModeBoundary:
		m := h.MovingLocked()
		m.Boundary = append(m.Boundary, w)
		h.Mu.Unlock()
		return true
	case ModeHold:
		m := h.MovingLocked()
		m.Held = append(m.Held, w)
		h.Mu.Unlock()
		return true
	case ModeHidden:
		m := h.MovingLocked()
		m.Waiting = append(m.Waiting, w)
		h.Mu.Unlock()
		return true
	}
	if w.Trace != nil {
		w.Trace.Queued = time.Now() // a span's time: the wall clock's
	}
	h.Queue = append(h.Queue, w)
	start := !h.Running
	h.Running = true
	h.Mu.Unlock()
	if start {
		h.StartDrain()
	}
	return true
}

// StartDrain runs the mailbox's drain on a goroutine of its own, counted in
// the node's work (drain ends the count).
func (h *Object) StartDrain() {
	h.env.work.Add(1)
	go h.drain()
}

// RunInline executes w on the caller's goroutine when the object is idle
// (nothing running or queued): no goroutine or channel handoff on the common
// path. It reports false, having done nothing, when w must be queued.
func (h *Object) RunInline(w *Work) (*pb.CallReply, bool) {
	h.Mu.Lock()
	if h.Closed || h.Mode != ModeServing || h.Running || len(h.Queue) > 0 {
		h.Mu.Unlock()
		return nil, false
	}
	h.Running = true
	h.Mu.Unlock()
	h.env.work.Add(1)
	r := h.Execute(w)
	h.Mu.Lock()
	if !h.Mv.sealing() && len(h.Queue) == 0 && !h.Closed {
		h.Running = false
		h.Mu.Unlock()
		h.env.work.Done()
		return r, true
	}
	h.Mu.Unlock()
	// Something queued meanwhile, a seal waits or the object closed: a drain
	// takes over (it owns the work count taken above).
	go h.drain()
	return r, true
}

func (h *Object) drain() {
	defer h.env.work.Done()
	for {
		h.Mu.Lock()
		if h.Mv.sealing() {
			// A seal is waiting for the handler in progress: stop here.
			h.Running = false
			close(h.Mv.SealWait)
			h.Mv.SealWait = nil
			h.TidyLocked()
			h.Mu.Unlock()
			return
		}
		if len(h.Queue) == 0 || h.Closed {
			q := h.Queue
			h.Queue = nil
			h.Running = false
			closed := h.Closed
			h.Mu.Unlock()
			if closed {
				for _, w := range q {
					h.Answer(w, h.env.notHere(h.obj))
				}
			}
			return
		}
		w := h.Queue[0]
		h.Queue[0] = nil
		h.Queue = h.Queue[1:]
		h.Mu.Unlock()
		if w.Timer {
			h.fireTimers()
			continue
		}
		if w.Fn != nil {
			w.Fn()
			h.Answer(w, nil)
			continue
		}
		h.Answer(w, h.Execute(w))
	}
}

func (h *Object) Answer(w *Work, r *pb.CallReply) {
	switch {
	case w.Relay != nil:
		h.env.node.RelayReply(w, r)
	case w.Done != nil:
		select {
		case w.Done <- r:
		default: // answered already (a relay raced a local answer)
		}
	}
}

// close stops the object: queued requests are answered with a redirect.
// unhideLocked wakes whoever waits for h to leave hidden (h.Mu held).
func (h *Object) UnhideLocked() {
	if h.Mv != nil && h.Mv.Unhidden != nil {
		close(h.Mv.Unhidden)
		h.Mv.Unhidden = nil
		h.TidyLocked()
	}
}

func (h *Object) Close() {
	h.Mu.Lock()
	h.Closed = true
	h.UnhideLocked()
	if h.timer != nil {
		h.timer.Stop()
	}
	h.stopDeliveryLocked()
	idle := !h.Running
	q := h.Queue
	if idle {
		h.Queue = nil
	}
	var rest []*Work
	if m := h.Mv; m != nil {
		rest = append(append(append(m.Captured, m.Boundary...), m.Held...), m.Waiting...)
		m.Captured, m.Boundary, m.Held, m.Waiting = nil, nil, nil, nil
		h.TidyLocked()
	}
	h.Mu.Unlock()
	if idle {
		for _, w := range q {
			h.Answer(w, h.env.notHere(h.obj))
		}
	}
	for _, w := range rest {
		h.env.unroute(w)
		h.Answer(w, h.env.notHere(h.obj))
	}
}

func (h *Object) Reply(code pb.Code, payload []byte, msg string) *pb.CallReply {
	h.Mu.Lock()
	f, v := h.Fence, h.Version
	h.Mu.Unlock()
	return &pb.CallReply{Code: code, Payload: payload, Message: msg, Fence: h.env.wireFence(f, v, h.env.selfNode.RoutingID)}
}

// Execute runs one request on the drain goroutine. A traced one runs
// inside its spans (executeTraced, which calls back here with h.traced
// set): a frame more only for it, as every call's goroutine would
// otherwise grow its stack once more.
func (h *Object) Execute(w *Work) *pb.CallReply {
	if w.Trace != nil && h.traced == nil {
		return h.executeTraced(w)
	}
	n := h.env
	if h.IsLost() {
		return n.notHere(h.obj)
	}
	now := n.now()
	h.Used(now)
	if st := n.leaseStatus(now); st != lease.Valid {
		n.metrics.FencedRefusals.Inc()
		return h.Reply(pb.Code_CODE_UNAVAILABLE, nil, "owner cannot confirm its lease ("+st.String()+"): not serving")
	}
	if code, msg := h.Outdated(n.knownGeneration(w.Req), w.Op); code != pb.Code_CODE_OK {
		return h.Reply(code, nil, msg)
	}
	if h.Typ.Durable {
		if r := h.EnsureDurable(); r != nil {
			return r
		}
	}
	prev, dup, err := h.Replies.Check(w.Op, now)
	switch {
	case errors.Is(err, actor.ErrOperationExpired):
		return h.Reply(pb.Code_CODE_OPERATION_EXPIRED, nil, err.Error())
	case err != nil:
		return h.Reply(pb.Code_CODE_INVALID_OPERATION_ID, nil, err.Error())
	case dup:
		r := h.Reply(pb.Code(prev.Code), prev.Payload, prev.Message)
		r.Replayed = true
		n.metrics.DedupHits.Inc()
		return r
	}
	var sess *BoundSession
	if rs := w.Req.GetSession(); rs != nil {
		h.Mu.Lock()
		s, r := h.sessionOfLocked(rs, w.Req.GetSessionSeq())
		h.Mu.Unlock()
		if r != nil {
			return r
		}
		sess = s
	}
	if ms := w.Req.GetSender(); ms != nil {
		if r := n.checkSender(ms); r != nil { // messages.go
			return r
		}
	}
	var firing *reminder.Firing
	if w.Req.GetMethod() == reminder.Method {
		f, r := h.checkFiring(w.Req.GetArgs(), now) // reminders.go
		if r != nil {
			return r
		}
		firing = &f
	}
	hc := &handlerCtx{h: h, now: now, session: sess, op: w.Op}
	var out []byte
	var herr error
	if firing != nil {
		out, herr = h.runReminder(hc, *firing)
	} else {
		out, herr = h.handle(hc, w.Req.GetMethod(), w.Req.GetArgs())
	}
	if h.Typ.Durable && errors.Is(herr, actor.ErrPanicked) {
		// Its memory is suspect and etcd holds its last good state:
		// dropped, re-activated by the next call; nothing is recorded.
		h.DropDurable("its handler panicked")
		return h.Reply(pb.Code_CODE_INTERNAL, nil, herr.Error()+"; the change was not persisted")
	}
	if herr == nil {
		herr = h.RecordSends(hc.sends) // in this turn, before a durable persist (messages.go)
	}
	if errors.Is(herr, actor.ErrOutboxFull) {
		// Not recorded: a retry runs again once the outbox has room (a
		// refused request changed nothing: actor rule 4).
		return h.Reply(pb.Code_CODE_RESOURCE_EXHAUSTED, nil, herr.Error())
	}
	rec := actor.Reply{Code: int32(pb.Code_CODE_OK), Payload: out}
	if herr != nil {
		rec = actor.Reply{Code: int32(actor.CodeOf(herr)), Message: herr.Error()}
	}
	read := false // a durable turn that persisted nothing
	if h.Typ.Durable && !n.writeBehind() {
		// Persisted before it is recorded or acknowledged (durable.go).
		seq := h.Dur.seq
		if r := h.persistChange(&w.Op, rec, now); r != nil {
			return r
		}
		read = h.Dur.seq == seq
	}
	h.Replies.Record(w.Op, rec, now)
	h.Executed++
	if sess != nil || len(hc.pushes) > 0 {
		h.CommitPushes(sess, w.Req.GetSessionSeq(), hc.pushes)
	}
	switch {
	case n.xlog != nil && firing != nil:
		n.xlog.Reminder(h.name, h.CurrentFence(), w.Op, firingLabel(*firing), now)
	case n.xlog != nil && read && w.Req.GetSender() == nil:
		n.xlog.ReadOnly(h.name, h.CurrentFence(), w.Op, now)
	case n.xlog != nil:
		n.xlog.Request(h.name, h.CurrentFence(), w.Op, w.Req.GetSender().GetObject(), now) // before the reply leaves
	}
	if herr == nil && len(hc.sends) > 0 {
		h.KickDelivery()
	}
	if herr == nil && hc.del {
		if r := h.end(); r != nil { // delete.go: the reply leaves once the delete is decided
			return r
		}
	}
	// Check again just before the reply leaves (docs/design.md §5).
	if st := n.leaseStatus(n.now()); st == lease.Expired || st == lease.Lost || st == lease.Closed {
		n.metrics.FencedRefusals.Inc()
		return h.Reply(pb.Code_CODE_UNAVAILABLE, nil, "owner lost its lease before replying")
	}
	if h.IsLost() { // etcd moved it away while the handler ran: no reply under our fence
		return n.notHere(h.obj)
	}
	return h.Reply(pb.Code(rec.Code), rec.Payload, rec.Message)
}

func (h *Object) IsLost() bool {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	return h.Lost
}

// ---------------------------------------------------------------- timers

// Arm schedules a timer fire for the earliest due timer.
func (h *Object) Arm() {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	if h.Closed || h.Timers == nil || h.fireSet {
		return
	}
	next, ok := h.Timers.Next()
	if !ok {
		return
	}
	h.fireSet = true
	d := max(next.Sub(h.env.now()), 0)
	h.timer = h.env.clock.AfterFunc(d, func() {
		if !h.Submit(&Work{Timer: true}) {
			h.Mu.Lock()
			h.fireSet = false
			h.Mu.Unlock()
		}
	})
}

func (h *Object) fireTimers() {
	if h.Typ.Durable && !h.durableTimerGate() {
		return
	}
	h.Mu.Lock()
	h.fireSet = false
	var ticks []actor.Tick
	now := h.env.now()
	if h.Timers != nil {
		ticks = h.Timers.FireDue(now)
	}
	h.Mu.Unlock()
	if st := h.env.leaseStatus(now); st != lease.Valid && st != lease.Unusable {
		return
	}
	ended := false
	if to, ok := h.Inst.(actor.TimerObject); ok {
		for _, t := range ticks {
			hc := &handlerCtx{h: h, now: now, op: actor.TimerOperationID(h.name, t.Name, t.Index, now)}
			if err := h.Guard("OnTimer("+t.Name+")", func() error { return to.OnTimer(hc, t) }); err != nil {
				h.env.log.Warn().Str("object", h.name).Str("timer", t.Name).Err(err).Msg("timer handler failed")
				hc.sends, hc.del = nil, false
			}
			ended = ended || hc.del
			if err := h.RecordSends(hc.sends); err != nil {
				h.env.log.Error().Str("object", h.name).Str("timer", t.Name).Err(err).Msg("a timer's messages could not be recorded")
			}
			if len(hc.pushes) > 0 {
				h.CommitPushes(nil, 0, hc.pushes)
			}
			if h.env.xlog != nil {
				h.env.xlog.Timer(h.name, h.CurrentFence(), t.Name, now)
			}
		}
		if h.Typ.Durable && len(ticks) > 0 {
			h.persistTimers(now)
		}
	}
	if ended && h.end() == nil { // deleted (a timer's turn has no caller to tell otherwise)
		return
	}
	h.Arm()
	h.KickDelivery()
}

// CurrentFence is h's fence now.
func (h *Object) CurrentFence() authority.Fence {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	return h.Fence
}

// PruneReplies drops the replies of h's de-duplication table that the
// window expired by now.
func (h *Object) PruneReplies(now time.Time) {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	if h.Replies != nil {
		h.Replies.Prune(now)
	}
}
