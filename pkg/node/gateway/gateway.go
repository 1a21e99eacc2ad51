// Package gateway owns the gateway's side of sessions: SessionService
// holds each client's stream and runs its session.Gateway machine (pure,
// pkg/session); this package carries the machine's actions out (binds,
// forwarded calls, acks, frames to the client, answers to the owner's
// RPCs) and feeds it events. The owner's side is the node's: it holds the
// session's journal with the object.
package gateway

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/mtls"
	"github.com/meshloc/meshloc/pkg/node/peers"
	"github.com/meshloc/meshloc/pkg/session"
	"github.com/meshloc/meshloc/pkg/tracing"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// sessionTick is how often a gateway session's machine gets a Tick.
const sessionTick = 100 * time.Millisecond

// Host is what the gateway asks of its node.
type Host interface {
	// Route is the address of the node a call of obj goes to now (its
	// live owner, or the one placement picks), "" when none serves it.
	Route(obj keyspace.Object) string
	// KnownType fails for a type neither this node nor a live owner
	// hosts.
	KnownType(name string) error
	// LiveRequester reports whether rq names a live owner exactly (id,
	// generation, routing id) at the address it claims (etcd's owner
	// directory says).
	LiveRequester(rq *pb.Requester) bool
}

// Config is a gateway's node: what it is, what it may use.
type Config struct {
	// Self is this node as a session's gateway (Session and Binding
	// unset): the owner, its generation, routing id and address.
	Self        session.Ref
	CallTimeout time.Duration
	Clock       clock.Clock
	Log         zerolog.Logger
	Peers       *peers.Pool
	// Secured: peers authenticate with mutual TLS, and an owner's RPC must
	// come from the owner its fence names.
	Secured bool
	// Stopping is closed when the node stops: every session ends.
	Stopping <-chan struct{}
	Metrics  Metrics
	Host     Host
}

// Metrics are the gateway's session metrics.
type Metrics struct {
	Open   prometheus.Gauge
	Opened *prometheus.CounterVec // how: new, resumed
	Closed *prometheus.CounterVec // code
}

// Gateway is the sessions this node holds as their gateway.
type Gateway struct {
	cfg Config
	mu  sync.Mutex
	by  map[session.ID]*gwSession
}

// New is a gateway holding no session.
func New(cfg Config) *Gateway { return &Gateway{cfg: cfg, by: map[session.ID]*gwSession{}} }

// gwSession is one session's run at its gateway.
type gwSession struct {
	gw     *Gateway
	id     session.ID
	obj    keyspace.Object
	m      *session.Gateway
	events chan session.Event // from the RPC handlers and the run's goroutines
	ctx    context.Context    // the run's: ends with it
	wg     sync.WaitGroup

	amu     sync.Mutex
	next    int
	answers map[int]chan session.Answer
	done    chan struct{} // closed when the run ended
}

// Open (SessionService) is one session: its first frame opens or resumes
// it, then the run lasts until the client goes, the session closes, or
// the node stops.
func (gw *Gateway) Open(stream rpcpb.SessionService_OpenServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	open := first.GetOpen()
	obj, resume, err := gw.checkOpen(open)
	if err != nil {
		return stream.Send(closedFrame(wire.CodeOf(err), err.Error(), false))
	}
	id := session.NewID()
	if resume != nil {
		id = resume.Session
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	g := &gwSession{gw: gw, id: id, obj: obj, events: make(chan session.Event, 64), ctx: ctx,
		answers: map[int]chan session.Answer{}, done: make(chan struct{})}
	self := gw.cfg.Self
	self.Session = id
	g.m = session.NewGateway(session.GatewayConfig{Self: self, Object: obj.String(), Resume: resume, NowMs: gw.cfg.Clock.Now().UnixMilli()})
	if old := gw.put(g); old != nil {
		old.post(session.ClientGone{}) // the client came back here: the old stream is gone
	}
	defer gw.remove(g)
	how := map[bool]string{true: "resumed", false: "new"}[resume != nil]
	gw.cfg.Metrics.Opened.WithLabelValues(how).Inc()
	gw.cfg.Metrics.Open.Inc()
	defer gw.cfg.Metrics.Open.Dec()
	g.wg.Go(func() { g.receive(stream) })
	code := g.run(stream)
	cancel()
	g.wg.Wait()
	gw.cfg.Metrics.Closed.WithLabelValues(wire.CodeName(code)).Inc()
	return nil
}

// checkOpen checks a client's first frame.
func (gw *Gateway) checkOpen(o *pb.SessionOpen) (keyspace.Object, *session.Token, error) {
	if o == nil {
		return keyspace.Object{}, nil, fmt.Errorf("%w: the first frame of a session must be open", session.ErrInvalid)
	}
	if o.GetVersion() != wire.Version {
		return keyspace.Object{}, nil, fmt.Errorf("%w: wire version %d", session.ErrInvalid, o.GetVersion())
	}
	obj, err := keyspace.ParseObject(o.GetObject())
	if err != nil || obj.Kind != keyspace.KindActor {
		return keyspace.Object{}, nil, fmt.Errorf("%w: object %q: a session opens on an actor", wire.ErrInvalidArgument, o.GetObject())
	}
	if err := gw.cfg.Host.KnownType(obj.Type); err != nil {
		return keyspace.Object{}, nil, &wire.Error{Code: pb.Code_CODE_UNKNOWN_TYPE, Message: err.Error()}
	}
	r := o.GetResume()
	if r == nil {
		return obj, nil, nil
	}
	id, err := wire.ParseOperationIDBytes(r.GetSessionId())
	if err != nil || r.GetObject() != obj.String() || r.GetObjectGeneration() < 0 {
		return keyspace.Object{}, nil, fmt.Errorf("%w: resume token of session %x for %q", session.ErrInvalid, r.GetSessionId(), r.GetObject())
	}
	return obj, &session.Token{Session: id, Object: obj.String(), ReceivedPush: r.GetReceivedPush(), LastCall: r.GetLastCall(),
		ObjectGeneration: r.GetObjectGeneration()}, nil
}

func closedFrame(code pb.Code, msg string, resumable bool) *pb.SessionServerFrame {
	return &pb.SessionServerFrame{Frame: &pb.SessionServerFrame_Closed{Closed: &pb.SessionClosed{Code: code, Message: msg, Resumable: resumable}}}
}

// receive turns the client's frames into events; its end is ClientGone.
func (g *gwSession) receive(stream rpcpb.SessionService_OpenServer) {
	for {
		f, err := stream.Recv()
		if err != nil {
			g.post(session.ClientGone{})
			return
		}
		switch fr := f.GetFrame().(type) {
		case *pb.SessionClientFrame_Call:
			c := fr.Call
			g.post(session.ClientCall{Seq: c.GetSeq(), Method: c.GetMethod(), Args: c.GetArgs(), Op: c.GetOperationId(),
				Trace: tracing.Carry(c.GetTraceparent())})
		case *pb.SessionClientFrame_Ack:
			g.post(session.ClientAck{Push: fr.Ack.GetPush()})
		default:
			g.post(session.ClientGone{}) // a second open, or nothing: the client is confused
			return
		}
	}
}

// post delivers an event to the run, or drops it once the run ended.
func (g *gwSession) post(ev session.Event) {
	select {
	case g.events <- ev:
	case <-g.done:
	case <-g.ctx.Done():
	}
}

// run feeds the machine and carries its actions out; it returns the code
// the session ended with.
func (g *gwSession) run(stream rpcpb.SessionService_OpenServer) (code pb.Code) {
	defer close(g.done)
	ticker := g.gw.cfg.Clock.NewTicker(sessionTick)
	defer ticker.Stop()
	pending := g.m.Start()
	for {
		for len(pending) > 0 {
			a := pending[0]
			pending = pending[1:]
			if c, ok := a.(session.Close); ok {
				g.failAnswers()
				return c.Code
			}
			if ev := g.do(a, stream); ev != nil {
				pending = append(pending, g.step(ev)...)
			}
		}
		var ev session.Event
		select {
		case ev = <-g.events:
		case now := <-ticker.C():
			ev = session.Tick{NowMs: now.UnixMilli()}
		case <-g.gw.cfg.Stopping:
			ev = session.Stop{}
		case <-g.ctx.Done():
			ev = session.ClientGone{}
		}
		pending = append(pending, g.step(ev)...)
	}
}

func (g *gwSession) step(ev session.Event) []session.Action {
	out, err := g.m.Step(ev)
	if err != nil {
		g.gw.cfg.Log.Warn().Err(err).Str("session", g.id.String()).Msg("session step")
	}
	return out
}

// do carries out one action; a synchronous result comes back as an event.
func (g *gwSession) do(a session.Action, stream rpcpb.SessionService_OpenServer) session.Event {
	cfg := &g.gw.cfg
	switch a := a.(type) {
	case session.ToClient:
		if err := g.send(stream, a.Frame); err != nil {
			return session.ClientGone{}
		}
	case session.Answer:
		g.amu.Lock()
		ch := g.answers[a.Token]
		delete(g.answers, a.Token)
		g.amu.Unlock()
		if ch != nil {
			ch <- a
		}
	case session.Bind:
		req := &pb.SessionBindRequest{Object: g.obj.String(), Session: g.m.Ref().Proto(), ReceivedPush: a.Received, LastCall: a.LastCall,
			KnownObjectGeneration: a.KnownObjectGeneration}
		g.async(func() session.Event { return g.bind(a.Address, req) })
	case session.Forward:
		req := &pb.CallRequest{Version: wire.Version, Object: g.obj.String(), Method: a.Call.Method, Args: a.Call.Args, OperationId: a.Call.Op,
			Direct: true, KnownObjectGeneration: a.Owner.ObjectGeneration, SessionSeq: a.Call.Seq, Traceparent: a.Call.Trace}
		ref := g.m.Ref()
		ref.Binding = a.Binding
		req.Session = ref.Proto()
		g.async(func() session.Event {
			ctx, cancel := context.WithTimeout(g.ctx, cfg.CallTimeout)
			defer cancel()
			rep, err := g.forward(ctx, a.Owner.Address, req)
			return session.CallResult{Seq: a.Call.Seq, Binding: a.Binding, Reply: rep, Err: err}
		})
	case session.SendAck:
		ref := g.m.Ref()
		ref.Binding = a.Binding
		req := &pb.SessionAckRequest{Object: g.obj.String(), Session: ref.Proto(), Push: a.Push}
		g.async(func() session.Event {
			r, err := gwPeer(g, a.Owner.Address, func(ctx context.Context, c rpcpb.PeerServiceClient) (*pb.SessionAckReply, error) {
				return c.SessionAck(ctx, req)
			})
			if err == nil && r.GetCode() != pb.Code_CODE_OK {
				err = &wire.Error{Code: r.GetCode(), Message: "ack refused"}
			}
			return session.AckResult{Binding: a.Binding, Err: err}
		})
	}
	return nil
}

// async runs f on a goroutine of the run's and posts its event.
func (g *gwSession) async(f func() session.Event) {
	g.wg.Go(func() { g.post(f()) })
}

// bind asks addr (or, "", the node routing picks for the object) to bind
// the session.
func (g *gwSession) bind(addr string, req *pb.SessionBindRequest) session.Event {
	if addr == "" {
		if addr = g.gw.cfg.Host.Route(g.obj); addr == "" {
			return session.BindResult{Err: fmt.Errorf("no node serves %s", g.obj)}
		}
	}
	r, err := gwPeer(g, addr, func(ctx context.Context, c rpcpb.PeerServiceClient) (*pb.SessionBindReply, error) {
		return c.SessionBind(ctx, req)
	})
	if err != nil {
		return session.BindResult{Err: err}
	}
	f := r.GetFence()
	return session.BindResult{Code: r.GetCode(), Message: r.GetMessage(), Binding: r.GetBinding(), LastCall: r.GetLastCall(), Hint: r.GetHint().GetAddress(),
		Owner: ownerOf(f, addr)}
}

// gwPeer calls a node's PeerService at addr (an address the node's
// routing or an owner's reply named: the pool dials only live owners'),
// within the run and the call timeout.
func gwPeer[R any](g *gwSession, addr string, call func(context.Context, rpcpb.PeerServiceClient) (R, error)) (R, error) {
	var zero R
	conn, err := g.gw.cfg.Peers.Get(addr)
	if err != nil {
		return zero, err
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.gw.cfg.CallTimeout)
	defer cancel()
	return call(ctx, rpcpb.NewPeerServiceClient(conn))
}

// ask posts an event that an owner's RPC carries and waits for the
// machine's answer (or the RPC's end).
func (g *gwSession) ask(ctx context.Context, mk func(token int) session.Event) session.Answer {
	ch := make(chan session.Answer, 1)
	g.amu.Lock()
	g.next++
	t := g.next
	g.answers[t] = ch
	g.amu.Unlock()
	select {
	case g.events <- mk(t):
	case <-g.done:
		return session.Answer{Code: pb.Code_CODE_NOT_FOUND, Message: "session closed"}
	case <-ctx.Done():
		return session.Answer{Code: pb.Code_CODE_UNAVAILABLE, Message: ctx.Err().Error()}
	}
	select {
	case a := <-ch:
		return a
	case <-g.done:
		return session.Answer{Code: pb.Code_CODE_NOT_FOUND, Message: "session closed"}
	case <-ctx.Done():
		return session.Answer{Code: pb.Code_CODE_UNAVAILABLE, Message: ctx.Err().Error()}
	}
}

func (gw *Gateway) put(g *gwSession) (old *gwSession) {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	old = gw.by[g.id]
	gw.by[g.id] = g
	return old
}

func (gw *Gateway) remove(g *gwSession) {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	if gw.by[g.id] == g {
		delete(gw.by, g.id)
	}
}

func (gw *Gateway) get(id session.ID) *gwSession {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	return gw.by[id]
}

// gatewayOf finds the session an owner's RPC names, checking with mutual
// TLS that the sender is the owner its fence names.
func (gw *Gateway) gatewayOf(ctx context.Context, rs *pb.SessionRef, f *pb.Fence) (*gwSession, session.Owner, pb.Code, string) {
	ref, err := session.RefOf(rs)
	if err != nil {
		return nil, session.Owner{}, pb.Code_CODE_PROTOCOL_ERROR, err.Error()
	}
	if self := gw.cfg.Self; ref.Gateway != self.Gateway || ref.Generation != self.Generation || ref.RoutingID != self.RoutingID {
		return nil, session.Owner{}, pb.Code_CODE_STALE_FENCE, "this node is not that session's gateway"
	}
	if peer := mtls.PeerNode(ctx); gw.cfg.Secured && peer != f.GetOwnerId() {
		return nil, session.Owner{}, pb.Code_CODE_PERMISSION_DENIED, "sent by node " + peer + ", not " + f.GetOwnerId()
	}
	g := gw.get(ref.Session)
	if g == nil {
		// No session here (it ended, or this gateway restarted): not a
		// protocol error of the sender's.
		return nil, session.Owner{}, pb.Code_CODE_UNAVAILABLE, "no such session at this gateway"
	}
	return g, ownerOf(f, ""), pb.Code_CODE_OK, ""
}

// ownerOf is the object owner a fence names, at addr.
func ownerOf(f *pb.Fence, addr string) session.Owner {
	return session.Owner{ID: f.GetOwnerId(), Generation: f.GetOwnerGeneration(), Address: addr,
		ObjectGeneration: f.GetObjectGeneration(), AuthorityGeneration: f.GetAuthorityGeneration()}
}

// Deliver (PeerService.SessionDeliver): pushes for a session this node
// holds.
func (gw *Gateway) Deliver(ctx context.Context, m *pb.SessionDelivery) *pb.SessionDeliveryReply {
	g, from, code, _ := gw.gatewayOf(ctx, m.GetSession(), m.GetFence())
	if g == nil {
		if code == pb.Code_CODE_UNAVAILABLE {
			code = pb.Code_CODE_NOT_FOUND // the owner stops delivering: the next bind resumes it
		}
		return &pb.SessionDeliveryReply{Code: code}
	}
	if len(m.GetPushes()) > session.MaxPending {
		return &pb.SessionDeliveryReply{Code: pb.Code_CODE_PROTOCOL_ERROR}
	}
	pushes := make([]session.Push, 0, len(m.GetPushes()))
	for _, p := range m.GetPushes() {
		if len(p.GetPayload()) > session.MaxPushBytes {
			return &pb.SessionDeliveryReply{Code: pb.Code_CODE_PROTOCOL_ERROR}
		}
		pushes = append(pushes, session.PushOf(p))
	}
	ref, _ := session.RefOf(m.GetSession())
	a := g.ask(ctx, func(t int) session.Event {
		return session.Delivery{Token: t, From: from, Binding: ref.Binding, Pushes: pushes}
	})
	return &pb.SessionDeliveryReply{Code: a.Code, Delivered: a.Value}
}

// Seal (PeerService.SessionSeal): the object of a session this node
// holds is about to move.
func (gw *Gateway) Seal(ctx context.Context, m *pb.SessionSealRequest) *pb.SessionSealReply {
	g, from, code, msg := gw.gatewayOf(ctx, m.GetSession(), m.GetFence())
	if g == nil {
		return &pb.SessionSealReply{Code: code, Message: msg}
	}
	id, err := wire.ParseRelocationIDBytes(m.GetRelocationId())
	if err != nil {
		return &pb.SessionSealReply{Code: pb.Code_CODE_PROTOCOL_ERROR, Message: err.Error()}
	}
	ref, _ := session.RefOf(m.GetSession())
	a := g.ask(ctx, func(t int) session.Event {
		return session.SealAsked{Token: t, RelocationID: id.String(), From: from, Binding: ref.Binding, TargetID: m.GetTargetId(), TargetGen: m.GetTargetGeneration()}
	})
	return &pb.SessionSealReply{Code: a.Code, Message: a.Message, LastForwarded: a.Value}
}

// Route (PeerService.SessionRoute): the move of a session's object
// ended.
func (gw *Gateway) Route(ctx context.Context, m *pb.SessionRouteRequest) *pb.SessionRouteReply {
	g, from, code, msg := gw.gatewayOf(ctx, m.GetSession(), m.GetFence())
	if g == nil {
		return &pb.SessionRouteReply{Code: code, Message: msg}
	}
	id, err := wire.ParseRelocationIDBytes(m.GetRelocationId())
	if err != nil || m.GetAddress() == "" || len(m.GetAddress()) > wire.MaxAddressLen {
		return &pb.SessionRouteReply{Code: pb.Code_CODE_PROTOCOL_ERROR, Message: "bad relocation id or address"}
	}
	if !gw.cfg.Host.LiveRequester(&pb.Requester{OwnerId: from.ID, OwnerGeneration: from.Generation, RoutingId: m.GetFence().GetRoutingId(), Address: m.GetAddress()}) {
		return &pb.SessionRouteReply{Code: pb.Code_CODE_STALE_FENCE, Message: "the route names no live owner at that address"}
	}
	from.Address = m.GetAddress()
	ref, _ := session.RefOf(m.GetSession())
	a := g.ask(ctx, func(t int) session.Event {
		return session.RouteAsked{Token: t, RelocationID: id.String(), Commit: m.GetCommit(), From: from, Binding: ref.Binding}
	})
	return &pb.SessionRouteReply{Code: a.Code, Message: a.Message}
}

// failAnswers answers every RPC still waiting: the session is closed.
func (g *gwSession) failAnswers() {
	g.amu.Lock()
	defer g.amu.Unlock()
	for t, ch := range g.answers {
		ch <- session.Answer{Token: t, Code: pb.Code_CODE_NOT_FOUND, Message: "session closed"}
		delete(g.answers, t)
	}
}
