package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/session"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The gateway's side of sessions: SessionService holds each client's
// stream and runs its session.Gateway machine; this file carries the
// machine's actions out (binds, forwarded calls, acks, frames to the
// client, answers to the owner's RPCs) and feeds it events.

// sessionTick is how often a gateway session's machine gets a Tick.
const sessionTick = 100 * time.Millisecond

// gwSessions are the sessions this node holds as their gateway.
type gwSessions struct {
	mu sync.Mutex
	by map[session.ID]*gwSession
}

// gwSession is one session's run at its gateway.
type gwSession struct {
	n      *Node
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
func (s *sessionServer) Open(stream rpcpb.SessionService_OpenServer) error {
	n := s.n
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	open := first.GetOpen()
	obj, resume, err := n.checkOpen(open)
	if err != nil {
		return stream.Send(closedFrame(wire.CodeOf(err), err.Error(), false))
	}
	id := session.NewID()
	if resume != nil {
		id = resume.Session
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	g := &gwSession{n: n, id: id, obj: obj, events: make(chan session.Event, 64), ctx: ctx,
		answers: map[int]chan session.Answer{}, done: make(chan struct{})}
	self := session.Ref{Session: id, Gateway: n.self.ID, Generation: n.self.Generation, RoutingID: n.rid, Address: n.selfNode.Address}
	g.m = session.NewGateway(session.GatewayConfig{Self: self, Object: obj.String(), Resume: resume, NowMs: n.clock.Now().UnixMilli()})
	if old := n.gw.put(g); old != nil {
		old.post(session.ClientGone{}) // the client came back here: the old stream is gone
	}
	defer n.gw.remove(g)
	how := map[bool]string{true: "resumed", false: "new"}[resume != nil]
	n.metrics.sessionsOpened.WithLabelValues(how).Inc()
	n.metrics.sessionsOpen.Inc()
	defer n.metrics.sessionsOpen.Dec()
	g.wg.Go(func() { g.receive(stream) })
	code := g.run(stream)
	cancel()
	g.wg.Wait()
	n.metrics.sessionsClosed.WithLabelValues(wire.CodeName(code)).Inc()
	return nil
}

// checkOpen checks a client's first frame.
func (n *Node) checkOpen(o *pb.SessionOpen) (keyspace.Object, *session.Token, error) {
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
	if _, err := n.reg.Lookup(obj.Type); err != nil && !n.advertised(obj.Type) {
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
			g.post(session.ClientCall{Seq: c.GetSeq(), Method: c.GetMethod(), Args: c.GetArgs(), Op: c.GetOperationId()})
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
	n := g.n
	defer close(g.done)
	ticker := n.clock.NewTicker(sessionTick)
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
		case <-n.stopping:
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
		g.n.log.Warn().Err(err).Str("session", g.id.String()).Msg("session step")
	}
	return out
}

// do carries out one action; a synchronous result comes back as an event.
func (g *gwSession) do(a session.Action, stream rpcpb.SessionService_OpenServer) session.Event {
	n := g.n
	switch a := a.(type) {
	case session.ToClient:
		if err := stream.Send(a.Frame); err != nil {
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
			Direct: true, KnownObjectGeneration: a.Owner.ObjectGeneration, SessionSeq: a.Call.Seq}
		ref := g.m.Ref()
		ref.Binding = a.Binding
		req.Session = ref.Proto()
		g.async(func() session.Event {
			ctx, cancel := context.WithTimeout(g.ctx, n.cfg.CallTimeout)
			defer cancel()
			rep, err := n.peers.call(ctx, a.Owner.Address, req)
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
	n := g.n
	if addr == "" {
		typ, err := n.reg.Lookup(g.obj.Type)
		if err != nil {
			typ = actor.Type{Name: g.obj.Type}
		}
		if addr, _ = n.route(g.obj, typ); addr == "" {
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
	conn, err := g.n.peers.get(addr)
	if err != nil {
		return zero, err
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.n.cfg.CallTimeout)
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

func (s *gwSessions) put(g *gwSession) (old *gwSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by == nil {
		s.by = map[session.ID]*gwSession{}
	}
	old = s.by[g.id]
	s.by[g.id] = g
	return old
}

func (s *gwSessions) remove(g *gwSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by[g.id] == g {
		delete(s.by, g.id)
	}
}

func (s *gwSessions) get(id session.ID) *gwSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.by[id]
}

// sessionServer is SessionService.
type sessionServer struct {
	rpcpb.UnimplementedSessionServiceServer
	n *Node
}

// gatewayOf finds the session an owner's RPC names, checking with mutual
// TLS that the sender is the owner its fence names.
func (n *Node) gatewayOf(ctx context.Context, rs *pb.SessionRef, f *pb.Fence) (*gwSession, session.Owner, pb.Code, string) {
	ref, err := session.RefOf(rs)
	if err != nil {
		return nil, session.Owner{}, pb.Code_CODE_PROTOCOL_ERROR, err.Error()
	}
	if ref.Gateway != n.self.ID || ref.Generation != n.self.Generation || ref.RoutingID != n.rid {
		return nil, session.Owner{}, pb.Code_CODE_STALE_FENCE, "this node is not that session's gateway"
	}
	if peer := peerNode(ctx); n.tls != nil && peer != f.GetOwnerId() {
		return nil, session.Owner{}, pb.Code_CODE_PERMISSION_DENIED, "sent by node " + peer + ", not " + f.GetOwnerId()
	}
	g := n.gw.get(ref.Session)
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

// SessionDeliver (PeerService): pushes for a session this node holds.
func (s *peerServer) SessionDeliver(ctx context.Context, m *pb.SessionDelivery) (*pb.SessionDeliveryReply, error) {
	g, from, code, _ := s.n.gatewayOf(ctx, m.GetSession(), m.GetFence())
	if g == nil {
		if code == pb.Code_CODE_UNAVAILABLE {
			code = pb.Code_CODE_NOT_FOUND // the owner stops delivering: the next bind resumes it
		}
		return &pb.SessionDeliveryReply{Code: code}, nil
	}
	if len(m.GetPushes()) > session.MaxPending {
		return &pb.SessionDeliveryReply{Code: pb.Code_CODE_PROTOCOL_ERROR}, nil
	}
	pushes := make([]session.Push, 0, len(m.GetPushes()))
	for _, p := range m.GetPushes() {
		if len(p.GetPayload()) > session.MaxPushBytes {
			return &pb.SessionDeliveryReply{Code: pb.Code_CODE_PROTOCOL_ERROR}, nil
		}
		pushes = append(pushes, session.Push{Seq: p.GetSeq(), Payload: p.GetPayload()})
	}
	ref, _ := session.RefOf(m.GetSession())
	a := g.ask(ctx, func(t int) session.Event {
		return session.Delivery{Token: t, From: from, Binding: ref.Binding, Pushes: pushes}
	})
	return &pb.SessionDeliveryReply{Code: a.Code, Delivered: a.Value}, nil
}

// SessionSeal (PeerService): the object of a session this node holds is
// about to move.
func (s *peerServer) SessionSeal(ctx context.Context, m *pb.SessionSealRequest) (*pb.SessionSealReply, error) {
	g, from, code, msg := s.n.gatewayOf(ctx, m.GetSession(), m.GetFence())
	if g == nil {
		return &pb.SessionSealReply{Code: code, Message: msg}, nil
	}
	id, err := wire.ParseRelocationIDBytes(m.GetRelocationId())
	if err != nil {
		return &pb.SessionSealReply{Code: pb.Code_CODE_PROTOCOL_ERROR, Message: err.Error()}, nil
	}
	ref, _ := session.RefOf(m.GetSession())
	a := g.ask(ctx, func(t int) session.Event {
		return session.SealAsked{Token: t, RelocationID: id.String(), From: from, Binding: ref.Binding, TargetID: m.GetTargetId(), TargetGen: m.GetTargetGeneration()}
	})
	return &pb.SessionSealReply{Code: a.Code, Message: a.Message, LastForwarded: a.Value}, nil
}

// SessionRoute (PeerService): the move of a session's object ended.
func (s *peerServer) SessionRoute(ctx context.Context, m *pb.SessionRouteRequest) (*pb.SessionRouteReply, error) {
	g, from, code, msg := s.n.gatewayOf(ctx, m.GetSession(), m.GetFence())
	if g == nil {
		return &pb.SessionRouteReply{Code: code, Message: msg}, nil
	}
	id, err := wire.ParseRelocationIDBytes(m.GetRelocationId())
	if err != nil || m.GetAddress() == "" || len(m.GetAddress()) > wire.MaxAddressLen {
		return &pb.SessionRouteReply{Code: pb.Code_CODE_PROTOCOL_ERROR, Message: "bad relocation id or address"}, nil
	}
	if _, ok := s.n.requesterAddress(&pb.Requester{OwnerId: from.ID, OwnerGeneration: from.Generation, RoutingId: m.GetFence().GetRoutingId(), Address: m.GetAddress()}); !ok {
		return &pb.SessionRouteReply{Code: pb.Code_CODE_STALE_FENCE, Message: "the route names no live owner at that address"}, nil
	}
	from.Address = m.GetAddress()
	ref, _ := session.RefOf(m.GetSession())
	a := g.ask(ctx, func(t int) session.Event {
		return session.RouteAsked{Token: t, RelocationID: id.String(), Commit: m.GetCommit(), From: from, Binding: ref.Binding}
	})
	return &pb.SessionRouteReply{Code: a.Code, Message: a.Message}, nil
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
