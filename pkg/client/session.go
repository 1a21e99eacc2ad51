package client

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/session"
	"github.com/meshloc/meshloc/pkg/tracing"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Sessions: an ordered, exactly-once stream between this client and one
// object, held by a gateway node. Calls run in the order sent, each once;
// the object's pushes (actor.Context Push, Publish) arrive in order, each
// once. When the gateway goes away the session resumes on another one by
// itself (its token: what was received and answered); a session whose
// object's state was lost ends with CODE_STATE_LOST.

// ErrSessionClosed: a call on a session after Close, or after it ended.
var ErrSessionClosed = errors.New("client: session closed")

// Token resumes a session on any gateway (ResumeSession), in this process
// or another: the session, its object, the last push Recv returned and the
// last call answered.
type Token struct {
	Session      session.ID
	Object       string
	ReceivedPush uint64
	LastCall     uint64
	// ObjectGeneration is the life of the object the session was bound to:
	// resumed on a re-created memory object, the session ends STATE_LOST.
	ObjectGeneration int64
}

// String is the token's text form (ParseToken reads it).
func (t Token) String() string {
	b, _ := proto.Marshal(&pb.SessionToken{SessionId: t.Session[:], Object: t.Object, ReceivedPush: t.ReceivedPush, LastCall: t.LastCall,
		ObjectGeneration: t.ObjectGeneration})
	return base64.RawURLEncoding.EncodeToString(b)
}

// malformedToken is ParseToken's error: the text is no token a session
// printed (cut short, changed, or something else).
func malformedToken(why error) error {
	return fmt.Errorf("%w: malformed session token (not one a session printed, or cut short): %v", wire.ErrInvalidArgument, why)
}

// ParseToken reads a token's text form.
func ParseToken(s string) (Token, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	var m pb.SessionToken
	if err == nil {
		err = proto.Unmarshal(b, &m)
	}
	if err != nil {
		return Token{}, malformedToken(err)
	}
	id, err := wire.ParseOperationIDBytes(m.GetSessionId())
	if err != nil {
		return Token{}, malformedToken(err)
	}
	if _, err := keyspace.ParseObject(m.GetObject()); err != nil {
		return Token{}, malformedToken(err)
	}
	if m.GetObjectGeneration() < 0 {
		return Token{}, malformedToken(fmt.Errorf("object generation %d", m.GetObjectGeneration()))
	}
	return Token{Session: id, Object: m.GetObject(), ReceivedPush: m.GetReceivedPush(), LastCall: m.GetLastCall(),
		ObjectGeneration: m.GetObjectGeneration()}, nil
}

// Push is one message from the object.
type Push struct {
	Seq     uint64
	Payload []byte
	// Traceparent is the W3C trace context of the turn that pushed it,
	// when that turn was traced (empty otherwise): pass it to
	// tracing.WithTraceparent to continue that trace.
	Traceparent string
}

// Session is one open session. Call and Recv may be used from different
// goroutines; calls are sent one at a time, in order.
type Session struct {
	c      *Client
	object string

	callMu sync.Mutex // one call at a time: they run in order

	mu          sync.Mutex
	cond        *sync.Cond
	id          session.ID
	nextSeq     uint64
	lastCall    uint64
	consumed    uint64 // the last push Recv returned
	queued      uint64 // the last push queued
	queue       []Push
	outstanding map[uint64]*pb.SessionCall
	replies     map[uint64]chan *pb.CallReply
	stream      rpcpb.SessionService_OpenClient
	cancel      context.CancelFunc
	gateway     string
	gen         int64           // the object life the session is bound to
	fence       authority.Fence // the newest fence heard (after STATE_LOST: the new life's)
	sendMu      sync.Mutex
	err         error // the session ended
	closed      bool
	resuming    bool
	wg          sync.WaitGroup
}

// OpenSession opens a new session on object.
func (c *Client) OpenSession(ctx context.Context, object string) (*Session, error) {
	return c.openSession(ctx, object, nil)
}

// ResumeSession opens the session of t again, on any gateway: the calls
// after t.LastCall may be sent again (with the same operation ids, by
// CallOp), and the pushes after t.ReceivedPush arrive.
func (c *Client) ResumeSession(ctx context.Context, t Token) (*Session, error) {
	return c.openSession(ctx, t.Object, &t)
}

func (c *Client) openSession(ctx context.Context, object string, t *Token) (*Session, error) {
	s := &Session{c: c, object: object, nextSeq: 1, outstanding: map[uint64]*pb.SessionCall{}, replies: map[uint64]chan *pb.CallReply{}}
	s.cond = sync.NewCond(&s.mu)
	if t != nil {
		s.id, s.nextSeq, s.lastCall, s.consumed, s.queued = t.Session, t.LastCall+1, t.LastCall, t.ReceivedPush, t.ReceivedPush
		s.gen = t.ObjectGeneration
	}
	if err := s.connect(ctx, t != nil, ""); err != nil {
		return nil, err
	}
	return s, nil
}

// gateways lists the nodes a session may open on: the configured ones, or
// every live serving owner.
func (c *Client) gateways() []string {
	if len(c.cfg.Nodes) > 0 {
		return append([]string(nil), c.cfg.Nodes...)
	}
	if c.dir == nil {
		return nil
	}
	var out []string
	for _, o := range c.dir.List() {
		if o.Candidate().Serving {
			out = append(out, o.Descriptor.Address)
		}
	}
	return out
}

// connect opens the stream on a gateway (another than avoid, when there is
// one) and waits for its opened frame; resume sends the token.
func (s *Session) connect(ctx context.Context, resume bool, avoid string) error {
	gws := s.c.gateways()
	rand.Shuffle(len(gws), func(i, j int) { gws[i], gws[j] = gws[j], gws[i] })
	if len(gws) > 1 {
		for i, g := range gws {
			if g == avoid {
				gws[i], gws[len(gws)-1] = gws[len(gws)-1], gws[i]
				break
			}
		}
	}
	var last error = ErrNoNodes
	for _, addr := range gws {
		if err := s.connectTo(ctx, addr, resume); err != nil {
			var we *wire.Error
			if errors.As(err, &we) && !wire.Retryable(we.Code) && we.Code != pb.Code_CODE_PROTOCOL_ERROR {
				return err // the session's own answer (state lost, a bad object): no other gateway says else
			}
			last = err
			continue
		}
		return nil
	}
	return last
}

func (s *Session) connectTo(ctx context.Context, addr string, resume bool) error {
	conn, err := s.c.conn(addr)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(context.Background()) // the stream outlives ctx: ctx bounds the open only
	stream, err := rpcpb.NewSessionServiceClient(conn).Open(sctx)
	if err != nil {
		cancel()
		return err
	}
	open := &pb.SessionOpen{Version: wire.Version, Object: s.object}
	s.mu.Lock()
	if resume {
		open.Resume = &pb.SessionToken{SessionId: s.id[:], Object: s.object, ReceivedPush: s.queued, LastCall: s.lastCall, ObjectGeneration: s.gen}
	}
	s.mu.Unlock()
	if err := stream.Send(&pb.SessionClientFrame{Frame: &pb.SessionClientFrame_Open{Open: open}}); err != nil {
		cancel()
		return err
	}
	first := make(chan error, 1)
	var f *pb.SessionServerFrame
	go func() { // bounded by ctx: a gateway that never answers is left
		var err error
		f, err = stream.Recv()
		first <- err
	}()
	select {
	case err = <-first:
	case <-ctx.Done():
		cancel()
		<-first
		return ctx.Err()
	}
	if err != nil {
		cancel()
		return err
	}
	if c := f.GetClosed(); c != nil {
		cancel()
		s.mu.Lock()
		s.heard(c.GetFence())
		s.mu.Unlock()
		return &wire.Error{Code: c.GetCode(), Message: c.GetMessage()}
	}
	o := f.GetOpened()
	if o == nil {
		cancel()
		return fmt.Errorf("%w: the gateway's first frame is not opened", session.ErrInvalid)
	}
	id, err := wire.ParseOperationIDBytes(o.GetSessionId())
	if err != nil {
		cancel()
		return err
	}
	s.mu.Lock()
	s.id, s.stream, s.cancel, s.gateway = id, stream, cancel, addr
	s.heard(o.GetFence())
	s.gen = max(s.gen, s.fence.ObjectGeneration)
	// Every call without a reply goes again, with its operation id: one
	// that ran already (o.LastCall may say so) is answered from the
	// object's de-duplication table, so its caller gets its reply.
	var again []*pb.SessionCall
	for seq := s.lastCall + 1; seq < s.nextSeq; seq++ {
		if c := s.outstanding[seq]; c != nil {
			again = append(again, c)
		}
	}
	if len(s.outstanding) == 0 && o.GetLastCall() > s.lastCall {
		// Resumed from a token another process left: calls after it ran
		// (their replies went with that process); number on after them.
		s.lastCall, s.nextSeq = o.GetLastCall(), max(s.nextSeq, o.GetLastCall()+1)
	}
	s.mu.Unlock()
	for _, c := range again { // sent again, in order, with their operation ids
		if err := s.send(&pb.SessionClientFrame{Frame: &pb.SessionClientFrame_Call{Call: c}}); err != nil {
			break // the receive loop sees the break
		}
	}
	s.wg.Add(1)
	go s.receive(stream)
	return nil
}

func (s *Session) send(f *pb.SessionClientFrame) error {
	s.mu.Lock()
	stream := s.stream
	s.mu.Unlock()
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return stream.Send(f)
}

// receive reads one stream's frames until it breaks, then resumes the
// session elsewhere (or ends it).
func (s *Session) receive(stream rpcpb.SessionService_OpenClient) {
	defer s.wg.Done()
	for {
		f, err := stream.Recv()
		if err != nil {
			s.broken(stream, err, true)
			return
		}
		switch fr := f.GetFrame().(type) {
		case *pb.SessionServerFrame_Reply:
			s.mu.Lock()
			seq := fr.Reply.GetSeq()
			if ch := s.replies[seq]; ch != nil {
				if r := fr.Reply.GetReply(); r.GetCode() == pb.Code_CODE_OK {
					s.heard(r.GetFence())
					s.gen = max(s.gen, s.fence.ObjectGeneration) // a durable object's new life
				}
				delete(s.replies, seq)
				delete(s.outstanding, seq)
				s.lastCall = max(s.lastCall, seq)
				ch <- fr.Reply.GetReply()
			}
			s.mu.Unlock()
		case *pb.SessionServerFrame_Push:
			s.mu.Lock()
			if p := fr.Push; p.GetSeq() == s.queued+1 {
				s.queued = p.GetSeq()
				s.queue = append(s.queue, Push{Seq: p.GetSeq(), Payload: p.GetPayload(), Traceparent: p.GetTraceparent()})
				s.cond.Broadcast()
			}
			s.mu.Unlock()
		case *pb.SessionServerFrame_Closed:
			c := fr.Closed
			s.mu.Lock()
			s.heard(c.GetFence())
			s.mu.Unlock()
			s.broken(stream, &wire.Error{Code: c.GetCode(), Message: c.GetMessage()}, c.GetResumable())
			return
		}
	}
}

// resumeFor bounds how long a session tries to resume after its gateway
// went away.
const resumeFor = 30 * time.Second

// broken: stream ended with err; resumable ones resume on another gateway.
func (s *Session) broken(stream rpcpb.SessionService_OpenClient, err error, resumable bool) {
	s.mu.Lock()
	if s.stream != stream || s.closed || s.err != nil {
		s.mu.Unlock()
		return
	}
	if s.cancel != nil {
		s.cancel()
	}
	if !resumable {
		s.endLocked(err)
		s.mu.Unlock()
		return
	}
	s.resuming = true
	avoid := s.gateway
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		deadline := time.Now().Add(resumeFor)
		for backoff := 20 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
			ctx, cancel := context.WithTimeout(s.c.bg, 5*time.Second)
			rerr := s.connect(ctx, true, avoid)
			cancel()
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				return
			}
			var we *wire.Error
			if rerr == nil || (errors.As(rerr, &we) && !wire.Retryable(we.Code)) || time.Now().After(deadline) || s.c.bg.Err() != nil {
				s.resuming = false
				if rerr != nil {
					s.endLocked(rerr)
				}
				s.mu.Unlock()
				return
			}
			s.mu.Unlock()
			time.Sleep(backoff)
		}
	}()
}

func (s *Session) endLocked(err error) {
	s.err = err
	for seq, ch := range s.replies {
		close(ch)
		delete(s.replies, seq)
	}
	s.cond.Broadcast()
}

// Call runs method on the session's object, after every call sent before
// it, once.
func (s *Session) Call(ctx context.Context, method string, args ...string) (*Reply, error) {
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	op := wire.NewOperationID()
	if tracing.On() {
		return s.tracedCall(ctx, op, method, b)
	}
	return s.call(ctx, op, method, b, "")
}

// call sends one call with the trace context tp (empty: none) and waits for
// its reply.
func (s *Session) call(ctx context.Context, op wire.OperationID, method string, b [][]byte, tp string) (*Reply, error) {
	s.callMu.Lock()
	defer s.callMu.Unlock()
	s.mu.Lock()
	if s.err != nil || s.closed {
		err := s.err
		s.mu.Unlock()
		return nil, errors.Join(ErrSessionClosed, err)
	}
	seq := s.nextSeq
	s.nextSeq++
	c := &pb.SessionCall{Seq: seq, Method: method, Args: b, OperationId: op[:], Traceparent: tp}
	ch := make(chan *pb.CallReply, 1)
	s.outstanding[seq], s.replies[seq] = c, ch
	resuming := s.resuming
	s.mu.Unlock()
	if !resuming {
		_ = s.send(&pb.SessionClientFrame{Frame: &pb.SessionClientFrame_Call{Call: c}}) // a failure shows as the stream's break: the call is sent again
	}
	select {
	case r, ok := <-ch:
		if !ok {
			s.mu.Lock()
			err := s.err
			s.mu.Unlock()
			return nil, errors.Join(ErrSessionClosed, err)
		}
		if r.GetCode() != pb.Code_CODE_OK {
			return nil, &wire.Error{Code: r.GetCode(), Message: r.GetMessage(), Hint: r.GetHint()}
		}
		return &Reply{Payload: r.GetPayload(), Fence: fenceOf(r.GetFence()), StoreVersion: r.GetFence().GetStoreVersion(),
			Replayed: r.GetReplayed(), Node: r.GetFence().GetOwnerId()}, nil
	case <-ctx.Done():
		// Its outcome is unknown; it stays outstanding and is sent again
		// on a resume, so the next calls still run after it.
		return nil, ctx.Err()
	}
}

// Recv returns the next push, in order, once; it acknowledges it.
func (s *Session) Recv(ctx context.Context) (Push, error) {
	stop := context.AfterFunc(ctx, func() { s.mu.Lock(); s.cond.Broadcast(); s.mu.Unlock() })
	defer stop()
	s.mu.Lock()
	for len(s.queue) == 0 && s.err == nil && !s.closed && ctx.Err() == nil {
		s.cond.Wait()
	}
	if len(s.queue) == 0 {
		err := ctx.Err()
		if err == nil {
			err = errors.Join(ErrSessionClosed, s.err)
		}
		s.mu.Unlock()
		return Push{}, err
	}
	p := s.queue[0]
	s.queue = s.queue[1:]
	s.consumed = p.Seq
	resuming := s.resuming
	s.mu.Unlock()
	if !resuming {
		_ = s.send(&pb.SessionClientFrame{Frame: &pb.SessionClientFrame_Ack{Ack: &pb.SessionAck{Push: p.Seq}}})
	}
	return p, nil
}

// Token is what resumes the session elsewhere (ResumeSession).
func (s *Session) Token() Token {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Token{Session: s.id, Object: s.object, ReceivedPush: s.consumed, LastCall: s.lastCall, ObjectGeneration: s.gen}
}

// Fence is the newest fence of the object the session heard: the one it
// was bound with, a reply's, or, once it ended STATE_LOST, the new life's.
func (s *Session) Fence() (authority.Fence, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fence, s.fence.ObjectGeneration > 0
}

// heard keeps f when it is newer than the fence the session knows (s.mu
// held).
func (s *Session) heard(f *pb.Fence) {
	if f.GetObjectGeneration() > s.fence.ObjectGeneration ||
		(f.GetObjectGeneration() == s.fence.ObjectGeneration && f.GetAuthorityGeneration() > s.fence.AuthorityGeneration) {
		s.fence = fenceOf(f)
	}
}

// Gateway is the node that holds the session now.
func (s *Session) Gateway() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gateway
}

// Err is why the session ended (nil while it is open).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the session here (the object keeps its journal: the token
// may still resume it). It waits for the session's goroutines.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.cancel != nil {
		s.cancel()
	}
	s.endLocked(ErrSessionClosed)
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}
