package session

import (
	"fmt"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Phase of a gateway's session.
type Phase int

// Phases.
const (
	Binding Phase = 1 + iota // asking the object's owner to bind the session
	Open                     // bound: calls are forwarded, pushes delivered
	Sealed                   // the object moves: calls are kept until its route
	Closed
)

func (p Phase) String() string {
	return [...]string{"invalid", "binding", "open", "sealed", "closed"}[min(max(int(p), 0), 4)]
}

// Owner is the object's owner as the gateway knows it.
type Owner struct {
	ID               string
	Generation       int64
	Address          string
	ObjectGeneration int64
	// AuthorityGeneration of the record the owner's fence came from.
	AuthorityGeneration int64
}

func (o Owner) same(p Owner) bool { return o.ID == p.ID && o.Generation == p.Generation }

// Token is a session's resume token (the client keeps it).
type Token struct {
	Session      ID
	Object       string
	ReceivedPush uint64
	LastCall     uint64
	// ObjectGeneration the session was bound to (0: unknown).
	ObjectGeneration int64
}

// Gateway timing and bounds.
const (
	// SealTimeoutMs: a seal without a route for this long (the target never
	// reached this gateway) makes the gateway bind again through etcd.
	SealTimeoutMs = 5000
	// BindRetryMs is the pause between two binds that failed.
	BindRetryMs = 100
	// MaxBinds bounds the binds in a row that fail before the session is
	// closed (unavailable, resumable).
	MaxBinds = 20
	// MaxQueued bounds the calls a client may have outstanding.
	MaxQueued = 256
)

// GatewayConfig is what a gateway machine decides from.
type GatewayConfig struct {
	// Self is the session and this gateway (Binding ignored).
	Self   Ref
	Object string
	// Resume: the client's token (nil: a new session).
	Resume *Token
	// KnownObjectGeneration: the object generation the session was bound to
	// before (0: none), from the resumed session's gateway state if any.
	KnownObjectGeneration int64
	// NowMs is the time the session starts (Unix ms; Tick moves it on), so
	// that a seal or a failed bind before the first Tick is timed from now.
	NowMs int64
}

// Gateway is the session owner's side of one session: a pure machine.
type Gateway struct {
	cfg     GatewayConfig
	phase   Phase
	nowMs   int64
	owner   Owner
	binding uint64

	nextSeq  uint64       // the seq the client's next call must have
	skipTo   uint64       // ... or, resumed with nothing outstanding, this one (0: none)
	queue    []ClientCall // calls not forwarded yet, in seq order
	inflight *ClientCall  // forwarded, no result yet (or to send again)
	sent     bool         // inflight is with the owner now
	sentWith uint64       // ... under this binding
	lastFwd  uint64

	delivered uint64 // the highest push sent to the client
	acked     uint64 // the highest push the client acknowledged
	ackSent   uint64 // ... and the owner has
	ackBusy   bool   // an ack is in flight
	ackFor    uint64 // ... of this push
	announced uint64 // the highest binding an ack reached the owner with

	seal        *sealState
	binds       int   // binds in a row that failed
	bindAt      int64 // the next bind, after a failure (0: none due)
	bindAddr    string
	bindBusy    bool
	lastRouted  string // the relocation whose route ended the last seal
	lastRouteOK pb.Code
	closed      bool
}

type sealState struct {
	relocation string
	targetID   string
	targetGen  int64
	atMs       int64
}

// NewGateway returns a machine about to bind.
func NewGateway(cfg GatewayConfig) *Gateway {
	g := &Gateway{cfg: cfg, phase: Binding, nextSeq: 1, nowMs: cfg.NowMs}
	if r := cfg.Resume; r != nil {
		g.nextSeq, g.delivered, g.acked, g.ackSent = r.LastCall+1, r.ReceivedPush, r.ReceivedPush, r.ReceivedPush
		g.cfg.KnownObjectGeneration = max(g.cfg.KnownObjectGeneration, r.ObjectGeneration)
	}
	return g
}

// Phase of the machine.
func (g *Gateway) Phase() Phase { return g.phase }

// Owner the session is bound to (zero before the first bind).
func (g *Gateway) Owner() Owner { return g.owner }

// Ref is the session owner fence now (this gateway, the binding).
func (g *Gateway) Ref() Ref { r := g.cfg.Self; r.Binding = g.binding; return r }

// Delivered is the highest push sent to the client.
func (g *Gateway) Delivered() uint64 { return g.delivered }

// Start returns the first action: bind through the gateway's routing.
func (g *Gateway) Start() []Action { return g.bind("") }

func (g *Gateway) bind(addr string) []Action {
	g.phase, g.bindBusy, g.bindAddr, g.bindAt = Binding, true, addr, 0
	if g.inflight != nil {
		g.sent = false // sent again once bound
	}
	return []Action{Bind{Address: addr, Received: g.delivered, LastCall: g.nextSeq - 1 - uint64(g.outstanding()), KnownObjectGeneration: max(g.owner.ObjectGeneration, g.cfg.KnownObjectGeneration)}}
}

// outstanding is the calls the client sent that got no reply yet.
func (g *Gateway) outstanding() int {
	n := len(g.queue)
	if g.inflight != nil {
		n++
	}
	return n
}

func (g *Gateway) close(code pb.Code, msg string, resumable bool) []Action {
	return g.closeWith(&pb.SessionClosed{Code: code, Message: msg, Resumable: resumable})
}

// lost closes the session: the object was re-created (fence: its new
// life's, when known), what the session had with the old one is gone.
func (g *Gateway) lost(msg string, fence *pb.Fence) []Action {
	return g.closeWith(&pb.SessionClosed{Code: pb.Code_CODE_STATE_LOST, Message: msg, Fence: fence})
}

func (g *Gateway) closeWith(c *pb.SessionClosed) []Action {
	if g.phase == Closed {
		return nil
	}
	g.phase = Closed
	return []Action{
		ToClient{Frame: &pb.SessionServerFrame{Frame: &pb.SessionServerFrame_Closed{Closed: c}}},
		Close{Code: c.GetCode(), Message: c.GetMessage(), Resumable: c.GetResumable()},
	}
}

// fence is the wire form of an owner's fence as the gateway knows it.
func (o Owner) fence() *pb.Fence {
	return &pb.Fence{OwnerId: o.ID, OwnerGeneration: o.Generation, ObjectGeneration: o.ObjectGeneration, AuthorityGeneration: o.AuthorityGeneration}
}

// next forwards the next call when the session is open and none is with
// the owner.
func (g *Gateway) next() []Action {
	if g.phase != Open || g.sent {
		return nil
	}
	if g.inflight == nil {
		if len(g.queue) == 0 {
			return nil
		}
		c := g.queue[0]
		g.queue = g.queue[1:]
		g.inflight = &c
	}
	g.sent, g.sentWith = true, g.binding
	g.lastFwd = max(g.lastFwd, g.inflight.Seq)
	return []Action{Forward{Call: *g.inflight, Owner: g.owner, Binding: g.binding}}
}

// ack sends the client's acknowledgement on when one is due and none is in
// flight. A new binding is always acknowledged once: the owner delivers
// what it holds when it hears the gateway holds its binding (its deliveries
// before that, racing the bind's reply, were refused as stale).
func (g *Gateway) ack() []Action {
	if g.phase != Open || g.ackBusy || (g.acked <= g.ackSent && g.binding <= g.announced) {
		return nil
	}
	g.ackBusy, g.ackFor = true, g.acked
	return []Action{SendAck{Owner: g.owner, Binding: g.binding, Push: g.acked}}
}

// Step takes one event and returns the actions to carry out, in order.
func (g *Gateway) Step(ev Event) ([]Action, error) {
	if g.phase == Closed {
		return g.closedAnswer(ev), nil
	}
	switch e := ev.(type) {
	case Tick:
		g.nowMs = e.NowMs
		return g.tick(), nil
	case ClientCall:
		return g.clientCall(e)
	case ClientAck:
		if e.Push > g.delivered {
			return g.close(pb.Code_CODE_PROTOCOL_ERROR, fmt.Sprintf("ack of push %d, %d delivered", e.Push, g.delivered), false), nil
		}
		g.acked = max(g.acked, e.Push)
		return g.ack(), nil
	case ClientGone:
		g.phase = Closed
		return []Action{Close{Code: pb.Code_CODE_OK, Message: "the client went away", Resumable: true}}, nil
	case Stop:
		return g.close(pb.Code_CODE_SHUTTING_DOWN, "the gateway stops: resume on another", true), nil
	case BindResult:
		return g.bound(e), nil
	case CallResult:
		return g.callResult(e), nil
	case AckResult:
		g.ackBusy = false
		if e.Err != nil {
			return nil, nil // the next tick sends it again
		}
		g.ackSent = max(g.ackSent, g.ackFor)
		g.announced = max(g.announced, e.Binding)
		return g.ack(), nil
	case Delivery:
		return g.delivery(e), nil
	case SealAsked:
		return g.sealAsked(e), nil
	case RouteAsked:
		return g.routeAsked(e), nil
	}
	return nil, fmt.Errorf("%w: event %T", ErrInvalid, ev)
}

// closedAnswer: a closed session still answers the RPCs that name it.
func (g *Gateway) closedAnswer(ev Event) []Action {
	switch e := ev.(type) {
	case Delivery:
		return []Action{Answer{Token: e.Token, Code: pb.Code_CODE_NOT_FOUND, Message: "session closed at this gateway"}}
	case SealAsked:
		return []Action{Answer{Token: e.Token, Code: pb.Code_CODE_NOT_FOUND, Message: "session closed at this gateway"}}
	case RouteAsked:
		return []Action{Answer{Token: e.Token, Code: pb.Code_CODE_NOT_FOUND, Message: "session closed at this gateway"}}
	}
	return nil
}

func (g *Gateway) tick() []Action {
	switch {
	case g.phase == Sealed && g.nowMs-g.seal.atMs >= SealTimeoutMs:
		// No route came (the target could not reach this gateway, or it
		// crashed): etcd says where the object is now.
		g.seal = nil
		return g.bind("")
	case g.phase == Binding && !g.bindBusy && g.bindAt != 0 && g.nowMs >= g.bindAt:
		return g.bind(g.bindAddr)
	}
	return g.ack()
}

func (g *Gateway) clientCall(c ClientCall) ([]Action, error) {
	if c.Seq == g.skipTo && c.Seq > g.nextSeq && g.outstanding() == 0 {
		// A client resumed from a token older than the object's journal
		// (another process's): the calls between ran, their replies are
		// gone; it numbers on after the last that ran.
		g.nextSeq = c.Seq
	}
	if c.Seq != g.nextSeq {
		return g.close(pb.Code_CODE_PROTOCOL_ERROR, fmt.Sprintf("call %d, expected %d", c.Seq, g.nextSeq), false), nil
	}
	if g.outstanding() >= MaxQueued {
		return g.close(pb.Code_CODE_RESOURCE_EXHAUSTED, fmt.Sprintf("more than %d calls outstanding", MaxQueued), true), nil
	}
	g.nextSeq++
	g.queue = append(g.queue, c)
	return g.next(), nil
}

func (g *Gateway) bound(e BindResult) []Action {
	g.bindBusy = false
	if g.phase != Binding {
		// A route bound the session while this bind was under way. The bind
		// took a newer binding (the owner's journal counts them all): the
		// owner expects that one now. An older or failed one changes nothing.
		if g.phase == Open && e.Err == nil && e.Code == pb.Code_CODE_OK && e.Binding > g.binding {
			g.owner, g.binding = e.Owner, e.Binding
			g.sent = false // sent again under the new binding; its first answer is STALE_FENCE
		}
		return append(g.next(), g.ack()...)
	}
	switch {
	case e.Err == nil && e.Code == pb.Code_CODE_OK:
		g.binds = 0
		first := g.owner.ID == ""
		g.owner, g.binding, g.phase = e.Owner, e.Binding, Open
		var out []Action
		if g.cfg.Resume != nil && e.LastCall >= g.nextSeq {
			g.skipTo = e.LastCall + 1
		}
		if first || g.cfg.Resume != nil {
			out = append(out, ToClient{Frame: &pb.SessionServerFrame{Frame: &pb.SessionServerFrame_Opened{Opened: &pb.SessionOpened{
				SessionId: g.cfg.Self.Session[:], LastCall: e.LastCall, Fence: g.owner.fence()}}}})
			g.cfg.Resume = nil
		}
		out = append(out, g.next()...)
		return append(out, g.ack()...)
	case e.Err == nil && e.Code == pb.Code_CODE_STATE_LOST:
		return g.lost("the object was re-created: "+e.Message, e.Owner.fence())
	case e.Err == nil && (e.Code == pb.Code_CODE_NOT_OWNER || e.Code == pb.Code_CODE_RELOCATING) && e.Hint != "":
		g.bindAddr = e.Hint
	case e.Err == nil && e.Code != pb.Code_CODE_UNAVAILABLE && e.Code != pb.Code_CODE_SHUTTING_DOWN &&
		e.Code != pb.Code_CODE_NOT_OWNER && e.Code != pb.Code_CODE_RELOCATING:
		return g.close(e.Code, "bind refused: "+e.Message, false)
	default:
		g.bindAddr = "" // ask routing again
	}
	g.binds++
	if g.binds >= MaxBinds {
		return g.close(pb.Code_CODE_UNAVAILABLE, "the object's owner could not be reached: resume later", true)
	}
	g.bindAt = g.nowMs + BindRetryMs
	return nil
}

func (g *Gateway) callResult(e CallResult) []Action {
	if g.inflight == nil || e.Seq != g.inflight.Seq {
		return nil // a late result of a call answered already
	}
	code := e.Reply.GetCode()
	staleBinding := code == pb.Code_CODE_STALE_FENCE && e.Reply.GetFence() == nil
	retry := e.Err != nil || code == pb.Code_CODE_UNAVAILABLE || code == pb.Code_CODE_SHUTTING_DOWN ||
		code == pb.Code_CODE_NOT_OWNER || code == pb.Code_CODE_RELOCATING || staleBinding
	if current := g.sent && e.Binding == g.sentWith; !current {
		if retry {
			return nil // an earlier send's: the call went again (or goes after the bind) and that answers
		}
	} else {
		g.sent = false
	}
	switch {
	case retry && (g.phase == Sealed || g.bindBusy):
		return nil // a seal explains it (sent again after the route), or a bind is under way
	case staleBinding && g.sentWith == g.binding && e.Reply.GetHint().GetAddress() != "":
		// The owner holds a newer binding of this gateway's (a route on
		// its way, or one refused here): bind again there.
		return g.bind(e.Reply.GetHint().GetAddress())
	case staleBinding && g.sentWith == g.binding:
		// The owner knows a newer binding, not this gateway's: another
		// gateway took the session.
		return g.close(pb.Code_CODE_STALE_FENCE, "another gateway holds the session now: "+e.Reply.GetMessage(), false)
	case staleBinding:
		return g.next() // the binding moved on since the send: sent again under the new one
	case retry:
		// The owner moved or is gone: bind again where the object is now.
		return g.bind(e.Reply.GetHint().GetAddress())
	case code == pb.Code_CODE_STATE_LOST:
		out := []Action{ToClient{Frame: replyFrame(g.inflight.Seq, e.Reply)}}
		return append(out, g.lost(e.Reply.GetMessage(), e.Reply.GetFence())...)
	}
	out := []Action{ToClient{Frame: replyFrame(g.inflight.Seq, e.Reply)}}
	g.inflight, g.sent = nil, false
	return append(out, g.next()...)
}

func replyFrame(seq uint64, r *pb.CallReply) *pb.SessionServerFrame {
	return &pb.SessionServerFrame{Frame: &pb.SessionServerFrame_Reply{Reply: &pb.SessionReply{Seq: seq, Reply: r}}}
}

func (g *Gateway) delivery(e Delivery) []Action {
	if !g.bindingOf(e.From, e.Binding) {
		return []Action{Answer{Token: e.Token, Code: pb.Code_CODE_STALE_FENCE, Message: fmt.Sprintf("session bound to %s@%d binding %d", g.owner.ID, g.owner.Generation, g.binding), Value: g.delivered}}
	}
	var out []Action
	for _, p := range e.Pushes {
		if p.Seq <= g.delivered {
			continue // sent again: the client has it
		}
		if p.Seq != g.delivered+1 {
			break // a gap: the owner sends again from delivered
		}
		g.delivered = p.Seq
		out = append(out, ToClient{Frame: &pb.SessionServerFrame{Frame: &pb.SessionServerFrame_Push{Push: p.Proto()}}})
	}
	return append(out, Answer{Token: e.Token, Code: pb.Code_CODE_OK, Value: g.delivered})
}

// bindingOf: from is the owner the session is bound to, with its binding.
func (g *Gateway) bindingOf(from Owner, binding uint64) bool {
	return g.phase != Binding && g.owner.same(from) && binding == g.binding
}

func (g *Gateway) sealAsked(e SealAsked) []Action {
	if g.seal != nil && g.seal.relocation == e.RelocationID {
		return []Action{Answer{Token: e.Token, Code: pb.Code_CODE_OK, Value: g.lastFwd}} // a repeated seal: the same answer
	}
	if e.RelocationID == g.lastRouted {
		// A seal of a relocation whose route came already (late, or
		// repeated after its end): never installed again.
		return []Action{Answer{Token: e.Token, Code: pb.Code_CODE_ALREADY_TERMINAL, Message: "the relocation's route came already"}}
	}
	switch {
	case g.phase == Binding:
		// Binding (again): no call goes to the mover until a bind says
		// where the object is; nothing to hold. (A gateway with no session
		// bound is Unavailable, not a protocol error.)
		return []Action{Answer{Token: e.Token, Code: pb.Code_CODE_UNAVAILABLE, Message: "session binding"}}
	case !g.owner.same(e.From) || e.Binding != g.binding:
		return []Action{Answer{Token: e.Token, Code: pb.Code_CODE_STALE_FENCE,
			Message: fmt.Sprintf("seal from %s@%d binding %d; the session is bound to %s@%d binding %d", e.From.ID, e.From.Generation, e.Binding, g.owner.ID, g.owner.Generation, g.binding)}}
	case g.seal != nil:
		return []Action{Answer{Token: e.Token, Code: pb.Code_CODE_CONFLICT, Message: "sealed by relocation " + g.seal.relocation}}
	}
	g.phase = Sealed
	g.seal = &sealState{relocation: e.RelocationID, targetID: e.TargetID, targetGen: e.TargetGen, atMs: g.nowMs}
	return []Action{Answer{Token: e.Token, Code: pb.Code_CODE_OK, Value: g.lastFwd}}
}

func (g *Gateway) routeAsked(e RouteAsked) []Action {
	if g.seal == nil || g.seal.relocation != e.RelocationID {
		if e.RelocationID == g.lastRouted {
			return []Action{Answer{Token: e.Token, Code: g.lastRouteOK, Message: "route taken already"}} // repeated: ignored
		}
		if g.phase != Closed && e.Binding > g.binding && e.From.ObjectGeneration >= g.owner.ObjectGeneration &&
			(e.Commit || (g.seal == nil && g.owner.same(e.From))) {
			// The seal never reached this gateway (or it timed out and a
			// bind is under way): a commit route with a newer binding is
			// where the object is; an abort route from the owner the
			// session is bound to rebinds it there.
			return g.applyRoute(e)
		}
		return []Action{Answer{Token: e.Token, Code: pb.Code_CODE_STALE_FENCE, Message: "no seal of relocation " + e.RelocationID}}
	}
	switch {
	case e.Commit && (e.From.ID != g.seal.targetID || e.From.Generation != g.seal.targetGen):
		return []Action{Answer{Token: e.Token, Code: pb.Code_CODE_PERMISSION_DENIED,
			Message: fmt.Sprintf("commit route from %s@%d; the seal named target %s@%d", e.From.ID, e.From.Generation, g.seal.targetID, g.seal.targetGen)}}
	case !e.Commit && !g.owner.same(e.From):
		return []Action{Answer{Token: e.Token, Code: pb.Code_CODE_PERMISSION_DENIED, Message: "abort route from " + e.From.ID + ", not the session's owner"}}
	case e.Binding <= g.binding:
		return []Action{Answer{Token: e.Token, Code: pb.Code_CODE_STALE_FENCE, Message: fmt.Sprintf("route binding %d, the session's is %d", e.Binding, g.binding)}}
	}
	return g.applyRoute(e)
}

func (g *Gateway) applyRoute(e RouteAsked) []Action {
	g.owner, g.binding, g.phase, g.seal = e.From, e.Binding, Open, nil
	g.bindAt, g.binds = 0, 0 // a bind under way still answers (bound)
	g.lastRouted, g.lastRouteOK = e.RelocationID, pb.Code_CODE_OK
	g.announced = max(g.announced, e.Binding) // the route's answer tells the owner
	out := []Action{Answer{Token: e.Token, Code: pb.Code_CODE_OK}}
	out = append(out, g.next()...)
	return append(out, g.ack()...)
}
