package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/mtls"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Errors of relocation requests.
var (
	// ErrNotHosted: the object is not hosted (serving) on this node.
	ErrNotHosted = errors.New("node: object not hosted here")
	// ErrAlreadyRelocating: a relocation of the object is in flight.
	ErrAlreadyRelocating = errors.New("node: object already relocating")
	// ErrNoTarget: no live serving node can take the object.
	ErrNoTarget = errors.New("node: no relocation target")
	// ErrInvalidRelocation: a relocation request is malformed (a target
	// that is no owner id, a timeout outside [0, --relocation-timeout]);
	// nothing was done.
	ErrInvalidRelocation = errors.New("node: invalid relocation request")
)

// validRelocation checks what a relocation request names besides the
// object: the target owner id (empty: placement chooses) and the timeout
// (0: --relocation-timeout; at most that, which every target also bounds
// a PREPARE's deadline by).
func (n *Node) validRelocation(target string, timeout time.Duration) error {
	if target != "" {
		if err := keyspace.ValidateOwnerID(target); err != nil {
			return fmt.Errorf("%w: target: %v", ErrInvalidRelocation, err)
		}
	}
	if timeout < 0 || timeout > n.cfg.RelocationTimeout {
		return fmt.Errorf("%w: timeout %s is outside [0, %s] (0: this node's --relocation-timeout)", ErrInvalidRelocation, timeout, n.cfg.RelocationTimeout)
	}
	return nil
}

// timeoutOfMs converts a wire timeout in milliseconds without overflow:
// one outside [0, --relocation-timeout] is ErrInvalidRelocation.
func (n *Node) timeoutOfMs(ms int64) (time.Duration, error) {
	if ms < 0 || ms > n.cfg.RelocationTimeout.Milliseconds() {
		return 0, fmt.Errorf("%w: timeout_ms %d is outside [0, %d] (0: this node's --relocation-timeout)", ErrInvalidRelocation, ms, n.cfg.RelocationTimeout.Milliseconds())
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// tickEvery drives the machines' clocks.
const tickEvery = 20 * time.Millisecond

// ---------------------------------------------------------------- reply routes

// relayRoute is where the reply of a request captured on a source goes.
type relayRoute struct {
	address      string
	route        uint64
	relocationID []byte
	op           []byte
	requester    *pb.Requester
}

// pendingRoutes are this node's requests that run elsewhere (captured or
// sent as DATA): their callers wait here for a relayed reply.
type pendingRoutes struct {
	mu    sync.Mutex
	next  uint64
	byID  map[uint64]*work
	ended map[uint64]struct{} // recently answered, for alreadyTerminal
	order []uint64
}

func newPendingRoutes() *pendingRoutes {
	return &pendingRoutes{byID: map[uint64]*work{}, ended: map[uint64]struct{}{}}
}

func (p *pendingRoutes) add(w *work) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.route == 0 {
		p.next++
		w.route = p.next
	}
	p.byID[w.route] = w
	return w.route
}

// take removes and returns the pending work of route; terminal reports a
// route answered before.
func (p *pendingRoutes) take(route uint64) (w *work, terminal bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w, ok := p.byID[route]; ok {
		delete(p.byID, route)
		p.ended[route] = struct{}{}
		p.order = append(p.order, route)
		if len(p.order) > 65536 {
			delete(p.ended, p.order[0])
			p.order = p.order[1:]
		}
		return w, false
	}
	_, terminal = p.ended[route]
	return nil, terminal
}

// peek returns the pending work of route without taking it.
func (p *pendingRoutes) peek(route uint64) *work {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byID[route]
}

func (n *Node) unroute(w *work) {
	if w.route != 0 {
		n.routes.take(w.route)
	}
}

// requester is this node as the requester of captured work.
func (n *Node) requester(route uint64) *pb.Requester {
	return &pb.Requester{OwnerId: n.self.ID, OwnerGeneration: n.self.Generation, RoutingId: n.rid[:], Address: n.selfNode.Address, ReplyRoute: route}
}

// relayReply sends the reply of a relocated request to its requester,
// acknowledged; retried a few times, then left to the caller's retry (the
// de-duplication table answers it).
func (n *Node) relayReply(w *work, r *pb.CallReply) {
	rr := w.relay
	if failpoint.Hit(failpoint.TargetBeforeRelay) != nil {
		return // the relay is lost: the caller's retry gets the reply from the de-duplication table
	}
	addr, ok := n.requesterAddress(rr.requester)
	if !ok {
		// The requester names no live owner: a stale or forged address
		// (it came in a payload or a DATA frame). Nothing is dialled; the
		// caller, if it exists, retries and gets the de-duplicated reply.
		n.metrics.relayed.WithLabelValues("not_an_owner").Inc()
		return
	}
	msg := &pb.ReplyRelay{RelocationId: rr.relocationID, OperationId: rr.op, ReplyRoute: rr.route, Requester: rr.requester, Reply: r}
	n.work.Add(1)
	go func() {
		defer n.work.Done()
		for attempt := range 4 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			conn, err := n.peers.get(addr)
			var ack *pb.ReplyRelayAck
			if err == nil {
				ack, err = rpcpb.NewPeerServiceClient(conn).RelayReply(ctx, msg)
			}
			cancel()
			if err == nil {
				n.metrics.relayed.WithLabelValues(wire.CodeName(ack.GetCode())).Inc()
				return
			}
			time.Sleep(time.Duration(attempt+1) * 50 * time.Millisecond)
		}
		n.metrics.relayed.WithLabelValues("failed").Inc()
	}()
}

// requesterAddress is where a relayed reply goes: the address etcd's owner
// directory names for the requester, only if the requester is exactly that
// live owner (id, generation, routing id) and claims that address.
func (n *Node) requesterAddress(rq *pb.Requester) (string, bool) {
	o, ok := n.dir.Lookup(rq.GetOwnerId())
	if !ok || o.Generation != rq.GetOwnerGeneration() || o.Descriptor.RoutingID != routingHex(rq.GetRoutingId()) || o.Descriptor.Address != rq.GetAddress() {
		return "", false
	}
	return o.Descriptor.Address, true
}

func routingHex(b []byte) string {
	r, err := wire.ParseRoutingIDBytes(b)
	if err != nil {
		return ""
	}
	return r.Hex()
}

// peerNode is the owner id a verified peer certificate names ("" without
// TLS).
func peerNode(ctx context.Context) string {
	id, err := mtls.PeerIdentity(ctx)
	if err != nil || id.Role != mtls.RoleNode {
		return ""
	}
	return id.Name
}

// RelayReply (PeerService) delivers a relayed reply to the waiting caller.
func (s *peerServer) RelayReply(ctx context.Context, m *pb.ReplyRelay) (*pb.ReplyRelayAck, error) {
	n := s.n
	rq := m.GetRequester()
	if rq.GetOwnerId() != n.self.ID || rq.GetOwnerGeneration() != n.self.Generation || !n.rid.Equal(rq.GetRoutingId()) {
		n.metrics.staleRefused.Inc()
		return &pb.ReplyRelayAck{Code: pb.Code_CODE_STALE_FENCE}, nil
	}
	w := n.routes.peek(m.GetReplyRoute())
	if w != nil && string(w.op[:]) != string(m.GetOperationId()) {
		return &pb.ReplyRelayAck{Code: pb.Code_CODE_PROTOCOL_ERROR}, nil
	}
	if w != nil && n.tls != nil && peerNode(ctx) != w.relayer {
		// Only the target the request was handed to may answer it.
		return &pb.ReplyRelayAck{Code: pb.Code_CODE_PERMISSION_DENIED}, nil
	}
	w, terminal := n.routes.take(m.GetReplyRoute())
	if w == nil {
		if terminal {
			return &pb.ReplyRelayAck{Code: pb.Code_CODE_ALREADY_TERMINAL}, nil
		}
		return &pb.ReplyRelayAck{Code: pb.Code_CODE_NOT_FOUND}, nil
	}
	if string(w.op[:]) != string(m.GetOperationId()) {
		return &pb.ReplyRelayAck{Code: pb.Code_CODE_PROTOCOL_ERROR}, nil
	}
	if f := m.GetReply().GetFence(); f != nil && !n.acceptFence(w.req.GetObject(), f) {
		n.metrics.staleRefused.Inc()
		m.Reply = &pb.CallReply{Code: pb.Code_CODE_STALE_FENCE, Message: "relayed reply older than a fence already seen"}
	}
	select {
	case w.done <- m.GetReply():
	default:
	}
	return &pb.ReplyRelayAck{Code: pb.Code_CODE_OK}, nil
}

// ---------------------------------------------------------------- byte budget

// budget bounds bytes in flight (STATE chunks) for the node and per peer.
type budget struct {
	mu   sync.Mutex
	cond *sync.Cond
	max  int64
	used int64
}

func newBudget(max int64) *budget {
	b := &budget{max: max}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *budget) acquire(ctx context.Context, n int64) error {
	n = min(n, b.max)
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.used+n > b.max {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		stop := context.AfterFunc(ctx, func() { b.mu.Lock(); b.cond.Broadcast(); b.mu.Unlock() })
		b.cond.Wait()
		stop()
	}
	b.used += n
	return nil
}

func (b *budget) release(n int64) {
	n = min(n, b.max)
	b.mu.Lock()
	b.used -= n
	b.cond.Broadcast()
	b.mu.Unlock()
}

func (n *Node) peerBudget(addr string) *budget {
	n.bmu.Lock()
	defer n.bmu.Unlock()
	b, ok := n.peerBudgets[addr]
	if !ok {
		b = newBudget(n.cfg.PeerBudgetBytes)
		n.peerBudgets[addr] = b
	}
	return b
}

// ---------------------------------------------------------------- status

type relocationRecord struct {
	mu sync.Mutex
	st *pb.RelocationStatus
}

func (r *relocationRecord) set(f func(*pb.RelocationStatus)) {
	r.mu.Lock()
	f(r.st)
	r.mu.Unlock()
}

func (r *relocationRecord) snapshot() *pb.RelocationStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return proto.Clone(r.st).(*pb.RelocationStatus)
}

func (n *Node) track(st *pb.RelocationStatus) *relocationRecord {
	rec := &relocationRecord{st: st}
	n.rmu.Lock()
	n.active[string(st.RelocationId)+st.Role] = rec
	n.rmu.Unlock()
	return rec
}

func (n *Node) untrack(rec *relocationRecord) {
	st := rec.snapshot()
	n.rmu.Lock()
	delete(n.active, string(st.RelocationId)+st.Role)
	n.recent = append(n.recent, st)
	if len(n.recent) > 256 {
		n.recent = n.recent[len(n.recent)-256:]
	}
	n.rmu.Unlock()
}

// Relocations lists relocations in flight and the most recent ended ones.
func (n *Node) Relocations() []*pb.RelocationStatus {
	n.rmu.Lock()
	defer n.rmu.Unlock()
	out := make([]*pb.RelocationStatus, 0, len(n.active)+len(n.recent))
	for _, r := range n.active {
		out = append(out, r.snapshot())
	}
	for _, st := range n.recent {
		out = append(out, proto.Clone(st).(*pb.RelocationStatus))
	}
	return out
}

// ---------------------------------------------------------------- source

// RelocateOptions of one relocation.
type RelocateOptions struct {
	// Target owner id; empty: chosen by placement among serving nodes.
	Target string
	// Timeout is the relocation deadline from now (0: Config.RelocationTimeout).
	Timeout time.Duration
}

// Relocate moves a hosted object to another node and returns when the
// relocation ended, with its status. The object keeps serving until the seal,
// and requests that arrive while it moves are executed by whichever side ends
// up owning it, in order.
func (n *Node) Relocate(ctx context.Context, name string, opts RelocateOptions) (*pb.RelocationStatus, error) {
	obj, err := keyspace.ParseObject(name)
	if err != nil {
		return nil, err
	}
	if err := n.validRelocation(opts.Target, opts.Timeout); err != nil {
		return nil, err
	}
	if obj.Kind == keyspace.KindGroup {
		return n.relocateGroup(ctx, obj, opts) // the group and every member (groups.go)
	}
	n.mu.Lock()
	h := n.objects[name]
	n.mu.Unlock()
	if h == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotHosted, name)
	}
	select {
	case <-h.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// An object that just arrived is hidden until its target admits it
	// (moments after the commit that the previous relocation waited for).
	for wait := time.Now().Add(2 * time.Second); ; {
		h.mu.Lock()
		if h.mode != modeHidden || h.closed || time.Now().After(wait) {
			break
		}
		h.mu.Unlock()
		if !sleepCtx(ctx, 5*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
	if h.failReply != nil || h.closed || h.mode != modeServing {
		h.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrNotHosted, name)
	}
	if h.relocating {
		h.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrAlreadyRelocating, name)
	}
	h.relocating = true
	h.mu.Unlock()
	defer func() { h.mu.Lock(); h.relocating = false; h.mu.Unlock() }()

	target, err := n.chooseTarget(obj, opts.Target)
	if errors.Is(err, ErrNoTarget) {
		// The owner directory may be catching up (a node's descriptor
		// update in flight): look once more after its next change.
		t := time.NewTimer(time.Second)
		select {
		case <-n.dir.Changed():
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		target, err = n.chooseTarget(obj, opts.Target)
	}
	if err != nil {
		return nil, err
	}
	snap, err := n.store.Read(ctx, obj)
	if err != nil {
		return nil, err
	}
	if snap.Record.Owner != n.self {
		return nil, fmt.Errorf("%w: %s is owned by %s", ErrNotHosted, name, snap.Record.Owner)
	}
	if snap.Record.Group != "" {
		if g, gerr := keyspace.ParseObject(snap.Record.Group); gerr == nil && n.draining.Load() {
			// A draining node moves a member's whole group: the member
			// cannot move alone, and must not be left behind (groups.go).
			h.mu.Lock()
			h.relocating = false
			h.mu.Unlock()
			return n.relocateGroup(ctx, g, opts)
		}
		return nil, &GroupMemberError{Object: name, Group: snap.Record.Group}
	}
	r := n.newSourceRun(obj, relocation.SourceConfig{Object: snap}, target, opts.Timeout)
	defer n.untrack(r.rec)
	r.h = h
	r.run(ctx)
	return r.rec.snapshot(), nil
}

// newSourceRun makes one source relocation of primary to target: its id and
// nonce, the pure machine (cfg gives what differs between an actor, a group
// and an Actor Join: Object, Members, JoinGroup), and its tracked status. The
// caller sets the hosted units, runs it and untracks it. timeout 0 is
// Config.RelocationTimeout.
func (n *Node) newSourceRun(primary keyspace.Object, cfg relocation.SourceConfig, target lease.Owner, timeout time.Duration) *sourceRun {
	if timeout <= 0 {
		timeout = n.cfg.RelocationTimeout
	}
	id := wire.NewRelocationID()
	now := n.now()
	cfg.ID, cfg.Self, cfg.SelfRoutingID, cfg.Nonce = id, n.self, n.rid, wire.NewNonce()
	cfg.Target = relocation.TargetRef{Owner: authority.OwnerRef{ID: target.Descriptor.OwnerID, Generation: target.Generation},
		Node: authority.NodeRef{RoutingID: target.Descriptor.RoutingID, Address: target.Descriptor.Address}}
	cfg.AppVersion, cfg.DeadlineMs, cfg.ChunkSize = n.cfg.ApplicationVersion, now.Add(timeout).UnixMilli(), n.cfg.ChunkBytes
	src := relocation.NewSource(cfg)
	rec := n.track(&pb.RelocationStatus{RelocationId: id[:], Object: primary.String(), Source: n.self.String(), Target: cfg.Target.Owner.String(),
		Role: "source", Phase: src.Phase().String(), StartedUnixMs: now.UnixMilli()})
	return &sourceRun{n: n, m: src, rec: rec, id: id, target: target, primary: primary, hardStop: now.Add(timeout + 5*time.Second),
		events: make(chan relocation.Event, 64), ended: make(chan struct{})}
}

// chooseTarget: a live serving owner other than this one, with weight > 0,
// the same application version, hosting the type (DESIGN.md §4 step 1).
func (n *Node) chooseTarget(obj keyspace.Object, want string) (lease.Owner, error) {
	var cands []lease.Owner
	for _, o := range n.dir.List() {
		d := o.Descriptor
		if d.OwnerID == n.self.ID || d.State != lease.StateServing || d.Weight <= 0 ||
			d.ApplicationVersion != n.cfg.ApplicationVersion || !hostsType(d.Types, obj.Type) {
			continue
		}
		if want != "" && d.OwnerID != want {
			continue
		}
		cands = append(cands, o)
	}
	if len(cands) == 0 {
		if want != "" {
			return lease.Owner{}, fmt.Errorf("%w: %s is not a live serving node that hosts %s (and is not this node)", ErrNoTarget, want, obj.Type)
		}
		return lease.Owner{}, fmt.Errorf("%w for %s", ErrNoTarget, obj)
	}
	total := 0
	for _, c := range cands {
		total += c.Descriptor.Weight
	}
	x := rand.IntN(total)
	for _, c := range cands {
		if x -= c.Descriptor.Weight; x < 0 {
			return c, nil
		}
	}
	return cands[len(cands)-1], nil
}

type sourceRun struct {
	n *Node
	h *hosted // the object moved; nil for a group (members below)
	m *relocation.Source
	// primary is the object the relocation is named for (h's, or the
	// group's); members are a group's hosted members (groups.go).
	primary keyspace.Object
	members []*hosted
	counts  []int  // DATA requests sent per hosted participant, in order
	onReady func() // called once when READY passed (Actor Join, join.go)
	rec     *relocationRecord
	id      wire.RelocationID
	target  lease.Owner
	// hardStop bounds the whole run: the deadline plus the settle.
	hardStop time.Time
	events   chan relocation.Event
	stream   rpcpb.PeerService_RelocateClient
	sealAt   time.Time
	payload  int
	settle   context.CancelFunc
	settleT  chan struct{} // a nudge to read again
	outcome  atomic.Bool   // the target's OUTCOME arrived (its count of DATA applied is known)
	outOK    atomic.Bool   // and said it committed
	wg       sync.WaitGroup
	done     bool
	ended    chan struct{} // closed when run returns: late events are dropped
}

func (r *sourceRun) emit(ev relocation.Event) {
	select {
	case r.events <- ev:
	case <-r.ended:
	default:
		go func() { // never block an I/O goroutine on a full queue
			select {
			case r.events <- ev:
			case <-r.ended:
			}
		}()
	}
}

func (r *sourceRun) run(parent context.Context) {
	n := r.n
	ctx, cancel := context.WithDeadline(context.Background(), r.hardStop)
	defer func() {
		// Order matters: stop settling and the stream first (a paused
		// target must not hold this relocation), then wait for the
		// goroutines, then release any late emitter.
		if r.settle != nil {
			r.settle()
		}
		cancel()
		r.wg.Wait()
		close(r.ended)
	}()
	conn, err := n.peers.get(r.target.Descriptor.Address)
	if err == nil {
		r.stream, err = rpcpb.NewPeerServiceClient(conn).Relocate(ctx)
	}
	if err != nil {
		r.rec.set(func(s *pb.RelocationStatus) {
			s.Outcome, s.Code, s.Message, s.EndedUnixMs = "aborted", pb.Code_CODE_UNAVAILABLE, "cannot reach the target: "+err.Error(), n.now().UnixMilli()
		})
		n.metrics.relocations.WithLabelValues("source", "aborted").Inc()
		return
	}
	r.wg.Add(1)
	go func() { // the receive loop
		defer r.wg.Done()
		for {
			f, err := r.stream.Recv()
			if err != nil {
				r.emit(relocation.StreamBroken{Err: err})
				return
			}
			r.emit(relocation.Received{Frame: f})
		}
	}()
	tick := time.NewTicker(tickEvery)
	defer tick.Stop()
	stopping := n.stopping
	queue := r.m.Start()
	for {
		for len(queue) > 0 {
			a := queue[0]
			queue = queue[1:]
			evs := r.do(ctx, a)
			for _, ev := range evs {
				out, err := r.m.Step(ev)
				if err != nil {
					n.log.Warn().Err(err).Str("relocation", r.id.String()).Msg("source step")
				}
				queue = append(queue, out...)
			}
			if !r.done {
				r.rec.set(func(s *pb.RelocationStatus) { s.Phase = r.m.Phase().String() })
			}
		}
		if r.done {
			_ = r.stream.CloseSend()
			return
		}
		var ev relocation.Event
		select {
		case ev = <-r.events:
		case <-tick.C:
			ev = relocation.Tick{NowMs: n.now().UnixMilli()}
		case <-parent.Done():
			ev = relocation.Stop{}
		case <-stopping:
			stopping = nil
			ev = relocation.Stop{}
		case <-ctx.Done():
			ev = relocation.Stop{}
		}
		if rv, ok := ev.(relocation.Received); ok {
			if o, ok := rv.Frame.GetFrame().(*pb.RelocationFrame_Outcome); ok && o.Outcome.GetCode() == pb.Code_CODE_OK && !r.sealAt.IsZero() {
				n.metrics.interruption.Observe(n.now().Sub(r.sealAt).Seconds())
				r.rec.set(func(s *pb.RelocationStatus) { s.InterruptionUs = n.now().Sub(r.sealAt).Microseconds() })
				r.sealAt = time.Time{}
			}
		}
		out, err := r.m.Step(ev)
		if err != nil {
			n.log.Warn().Err(err).Str("relocation", r.id.String()).Msg("source step")
		}
		queue = append(queue, out...)
		if r.onReady != nil && r.m.ReadyReceived() {
			r.onReady() // Actor Join: the caller is answered now (seed bug 24)
			r.onReady = nil
		}
		if rv, ok := ev.(relocation.Received); ok && rv.Frame.GetOutcome() != nil {
			r.outOK.Store(rv.Frame.GetOutcome().GetCode() == pb.Code_CODE_OK)
			r.outcome.Store(true) // after the machine took its DATA count
		}
		if _, ok := ev.(relocation.Received); ok && r.settleT != nil {
			select {
			case r.settleT <- struct{}{}:
			default:
			}
		}
	}
}

// do carries out one action; it returns the events that are its results.
func (r *sourceRun) do(ctx context.Context, a relocation.Action) []relocation.Event {
	n := r.n

	switch a := a.(type) {
	case relocation.WriteIntent:
		res, err := n.store.Intend(ctx, authority.IntentRequest{Seen: a.Seen, Members: a.Members, Source: n.self, Intent: a.Intent, LeaseID: n.keeper.LeaseID()})
		return []relocation.Event{relocation.IntentResult{Result: writeResult(res), Err: err}}
	case relocation.Seal:
		r.sealAt = n.now()
		segs, err := r.sealAll(ctx)
		if err == nil {
			err = failpoint.Hit(failpoint.SourceAfterSeal)
		}
		size := 0
		for _, sg := range segs {
			size += len(sg)
		}
		r.payload = size
		sealed := r.sealAt.UnixMicro()
		r.rec.set(func(s *pb.RelocationStatus) { s.PayloadBytes, s.SealedUnixUs = uint64(size), sealed })
		return []relocation.Event{relocation.Captured{Segments: segs, Err: err, SealedUnixUs: sealed}}
	case relocation.Send:
		if err := r.stream.Send(a.Frame); err != nil {
			return sendBroken(err)
		}
	case relocation.StreamChunks:
		if err := r.streamChunks(ctx, a.Segments, a.Manifest); err != nil {
			return sendBroken(err)
		}
		if err := failpoint.Hit(failpoint.SourceAfterLastChunk); err != nil {
			return []relocation.Event{relocation.StreamBroken{Err: err}}
		}
	case relocation.SendBoundary:
		if err := failpoint.Hit(failpoint.SourceBeforeCutover); err != nil {
			return []relocation.Event{relocation.BoundarySent{}} // nothing sent: the target's fallback decides
		}
		count, err := r.sendBoundary()
		if err != nil {
			n.log.Warn().Err(err).Str("relocation", r.id.String()).Msg("sending the boundary")
		}
		return []relocation.Event{relocation.BoundarySent{Count: count}}
	case relocation.Settle:
		r.startSettle(ctx)
	case relocation.Preserve:
		res, err := n.store.Preserve(ctx, authority.PreserveRequest{Seen: a.Seen, Members: a.Members, Source: n.self, RelocationID: r.id.String()})
		return []relocation.Event{relocation.PreserveResult{Result: writeResult(res), Err: err}}
	case relocation.Reopen:
		r.reopenAll(a)
		r.sealAt = time.Time{}
	case relocation.Drop:
		r.dropAll(a)
		if !r.sealAt.IsZero() { // the commit was seen before the target's OUTCOME
			d := n.now().Sub(r.sealAt)
			n.metrics.interruption.Observe(d.Seconds())
			r.rec.set(func(s *pb.RelocationStatus) { s.InterruptionUs = d.Microseconds() })
			r.sealAt = time.Time{}
		}
	case relocation.FailPending:
		for _, h := range r.units() {
			n.failAll(h, a.Code, a.Message)
		}
	case relocation.Finish:
		r.done = true
		o := a.Outcome.String()
		n.metrics.relocations.WithLabelValues("source", o).Inc()
		r.rec.set(func(s *pb.RelocationStatus) {
			s.Phase, s.Outcome, s.Code, s.Message, s.EndedUnixMs = "done", o, a.Code, a.Message, n.now().UnixMilli()
		})
		n.log.Debug().Str("relocation", r.id.String()).Str("object", r.primary.String()).Str("outcome", o).Str("message", a.Message).Msg("relocation ended")
	}
	return nil
}

func writeResult(w authority.WriteResult) relocation.WriteResult {
	return relocation.WriteResult{Written: w.Written, Found: w.Found, OwnerAlive: w.OwnerAlive, Snapshot: w.Snapshot, Members: w.Members}
}

// sendBroken is the event of a failed Send. io.EOF means the target ended
// the stream: what it said last (a FAILED frame, e.g. ShuttingDown) and the
// stream's status come through Recv, and the receive loop reports them
// (StreamBroken after the frames); reporting the break here could overtake
// the target's reason.
func sendBroken(err error) []relocation.Event {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return []relocation.Event{relocation.StreamBroken{Err: err}}
}

func (r *sourceRun) streamChunks(ctx context.Context, segs [][]byte, m relocation.Manifest) error {
	n := r.n
	pb2 := n.peerBudget(r.target.Descriptor.Address)
	for i := range m.Chunks {
		start, end := m.ChunkSpan(i)
		size := int64(end - start)
		if err := n.budget.acquire(ctx, size); err != nil {
			return err
		}
		if err := pb2.acquire(ctx, size); err != nil {
			n.budget.release(size)
			return err
		}
		err := failpoint.Hit(failpoint.SourceChunk)
		if err == nil {
			// A chunk inside one segment is a slice of it; one across
			// segments is copied into a buffer of its own, never reused:
			// gRPC sends a chunk's data after Send returns, without a copy
			// (transport's codecV2), and a slice of a segment must never
			// be written into (it is the sealed state, or the envelope).
			data := failpoint.Corrupt(failpoint.SourceChunkData, relocation.Gather(segs, start, end, nil))
			c := &pb.StateChunk{RelocationId: r.id[:], Index: i, Data: data}
			if int(i) < len(m.ChunkCRCs) {
				c.Crc32C = proto.Uint32(m.ChunkCRCs[i])
			}
			err = r.stream.Send(&pb.RelocationFrame{Frame: &pb.RelocationFrame_Chunk{Chunk: c}})
		}
		pb2.release(size)
		n.budget.release(size)
		if err != nil {
			return err
		}
		n.metrics.chunks.Inc()
		n.metrics.bytes.Add(float64(size))
	}
	return nil
}

// sendBoundary sends the requests that arrived after the seal as DATA, then
// CUTOVER; from now on new requests are held.
func (r *sourceRun) sendBoundary() (int, error) {
	n := r.n
	var ws []*work
	r.counts = r.counts[:0]
	for _, h := range r.units() { // a group's members in participant order
		h.mu.Lock()
		h.mode = modeHold
		ws = append(ws, h.boundary...)
		r.counts = append(r.counts, len(h.boundary))
		h.mu.Unlock()
	}
	var crc uint32
	for i, w := range ws {
		req := proto.Clone(w.req).(*pb.CallRequest)
		w.relayer = r.target.Descriptor.OwnerID
		req.Requester = n.requester(n.routes.add(w))
		crc = wire.UpdateCRC32C(crc, relocation.RequestBytes(req))
		if err := r.stream.Send(&pb.RelocationFrame{Frame: &pb.RelocationFrame_Data{Data: &pb.Data{RelocationId: r.id[:], Sequence: uint32(i), Request: req}}}); err != nil {
			return i, err
		}
	}
	err := r.stream.Send(&pb.RelocationFrame{Frame: &pb.RelocationFrame_Cutover{Cutover: &pb.Cutover{RelocationId: r.id[:], DataCount: uint32(len(ws)), DataCrc32C: crc}}})
	return len(ws), err
}

// startSettle decides the outcome from etcd: a read of the object and this
// owner's key at one revision, taken when the node's location cache (fed by
// its watch on authority/) shows the record changed, when the target's
// OUTCOME arrives, or every 250 ms (the deadline needs fresh reads too). It
// adds no watch of its own: one watch per relocation would serialise on the
// etcd client's watch stream. When the cache already shows the commit, that
// is the answer and no read is made (committedInCache): a relocation that
// completes costs one etcd round trip less.
func (r *sourceRun) startSettle(parent context.Context) {
	if r.settle != nil {
		select {
		case r.settleT <- struct{}{}:
		default:
		}
		return
	}
	n := r.n
	ctx, cancel := context.WithCancel(parent)
	r.settle = cancel
	r.settleT = make(chan struct{}, 1)
	seen := r.m.Prepare().GetCoordinator().GetStoreVersion()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		waited := false
		for r.waitSettle(ctx, seen) {
			c, ok := r.committedInCache()
			if !ok && !waited && r.outOK.Load() {
				// The target says it committed; the watch event is
				// normally a moment behind. Wait for it once, briefly,
				// rather than read.
				waited = true
				c, ok = r.waitCommitInCache(ctx)
			}
			if ok {
				if !r.outcome.Load() {
					// The target's OUTCOME says how many DATA requests it
					// applied (their replies come by relay); it normally
					// follows its commit within a hop. Without it every
					// boundary request is redirected, which is correct
					// (the target's de-duplication table answers the
					// retries) but slower.
					r.waitOutcome(ctx)
				}
				seen = max(seen, c.StoreVersion)
				r.emit(relocation.SettleResult{View: record.View{Objects: map[string]record.Snapshot{r.primary.String(): c}}})
				continue
			}
			v, err := n.store.ReadMany(ctx, r.objects(), []string{n.self.ID})
			if cur, ok := v.Objects[r.primary.String()]; err == nil && ok {
				seen = max(seen, cur.StoreVersion)
			}
			r.emit(relocation.SettleResult{View: v, Err: err})
		}
	}()
}

// committedInCache returns the object's record as the location cache holds
// it when it shows this relocation committed: the object generation the
// source planned from, a later owner generation, another owner, no intent.
// The cache holds only what etcd committed (its watch, and the results of
// this node's transactions and reads), and this is exactly the record in
// which a settle read decides "completed" (relocation.Source.settle), where
// the owner key the read also takes plays no part. Members of a group are
// left out: the drop takes their planned records (dropAll).
func (r *sourceRun) committedInCache() (record.Snapshot, bool) {
	loc, ok := r.n.cache.Lookup(r.primary)
	c := r.m.Prepare().GetCoordinator()
	if !ok || loc.Relocating || loc.ObjectGeneration != c.GetObjectGeneration() ||
		loc.OwnerGeneration <= c.GetAuthorityGeneration() || loc.Owner == r.n.self {
		return record.Snapshot{}, false
	}
	return record.Snapshot{Object: r.primary, StoreVersion: loc.StoreVersion, Record: record.Record{
		Kind: r.primary.Kind, Type: r.primary.Type, ObjectGeneration: loc.ObjectGeneration, OwnerGeneration: loc.OwnerGeneration,
		Owner: loc.Owner, Node: loc.Node, State: record.StateActive,
	}}, true
}

// waitCommitInCache waits up to 50 ms for the location cache to show the
// commit (committedInCache).
func (r *sourceRun) waitCommitInCache(ctx context.Context) (record.Snapshot, bool) {
	t := time.NewTimer(50 * time.Millisecond)
	defer t.Stop()
	for {
		changed := r.n.cache.Changed()
		if c, ok := r.committedInCache(); ok {
			return c, true
		}
		select {
		case <-ctx.Done():
			return record.Snapshot{}, false
		case <-t.C:
			return record.Snapshot{}, false
		case <-changed:
		}
	}
}

// waitOutcome waits until the target's OUTCOME arrived (a nudge follows
// it), for at most 250 ms: a target that crashed after committing never
// sends one.
func (r *sourceRun) waitOutcome(ctx context.Context) {
	t := time.NewTimer(250 * time.Millisecond)
	defer t.Stop()
	for !r.outcome.Load() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case <-r.settleT:
		}
	}
}

// waitSettle returns true when it is time to read again: the cache holds a
// record of the object newer than seen, a frame arrived from the target, or
// 250 ms passed; false when settling ended.
func (r *sourceRun) waitSettle(ctx context.Context, seen int64) bool {
	t := time.NewTimer(250 * time.Millisecond)
	defer t.Stop()
	for {
		if ctx.Err() != nil {
			return false // settling ended: never read again (a read on a canceled ctx fails, seen stays behind: a hot loop)
		}
		changed := r.n.cache.Changed()
		if loc, ok := r.n.cache.Lookup(r.primary); ok && loc.StoreVersion > seen {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		case <-r.settleT:
			return true
		case <-t.C:
			return true
		}
	}
}

// seal stops dispatch to h (the handler in progress finishes), captures its
// state, timers, de-duplication table and queue, and encodes the payload:
// the envelope header, then the state bytes as they are (no copy).
// Requests arriving from now on are kept as the boundary.
func (n *Node) seal(ctx context.Context, h *hosted, id wire.RelocationID, target string) ([][]byte, error) {
	if err := waitSealed(ctx, sealStart(h)); err != nil {
		return nil, err
	}
	ps, state, err := n.capture(h, target)
	if err != nil {
		return nil, err
	}
	return relocation.EncodeEnvelope(id, []*pb.ParticipantState{ps}, [][]byte{state})
}

// sealStart stops dispatch to h: requests arriving from now on are kept as
// the boundary. It returns a channel closed once the handler in progress
// (if any) finished, or nil when none runs.
func sealStart(h *hosted) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mode = modeBoundary
	if h.running {
		if h.sealWait == nil {
			h.sealWait = make(chan struct{})
		}
		return h.sealWait
	}
	return nil
}

func waitSealed(ctx context.Context, wait chan struct{}) error {
	if wait == nil {
		return nil
	}
	select {
	case <-wait:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// capture takes the state, timers, de-duplication table and queue of a
// sealed h (its handler finished): the participant's part of the envelope
// and its state bytes.
// target is the owner the queued requests are handed to: only it may relay
// their replies.
func (n *Node) capture(h *hosted, target string) (*pb.ParticipantState, []byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.timer != nil {
		h.timer.Stop()
		h.fireSet = false
	}
	state, err := h.inst.Snapshot()
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot %s: %w", h.name, err)
	}
	var timers []byte
	if h.timers != nil {
		timers = h.timers.Encode()
	}
	replies := h.replies.Encode()
	if h.replies.Len() > 0 && failpoint.Planted(failpoint.BugDedupNotTransferred) {
		// Planted (test builds only): the table stays behind; an empty one
		// with the same bounds travels.
		replies = actor.NewReplyTable(h.replies.Window(), h.replies.MaxEntries()).Encode()
	}
	ps := &pb.ParticipantState{
		Participant: &pb.Participant{Object: h.name, Type: h.typ.Name, ObjectGeneration: h.fence.ObjectGeneration,
			AuthorityGeneration: h.fence.OwnerGeneration, StoreVersion: h.version},
		StateLength: uint64(len(state)), Timers: timers, Replies: replies,
	}
	h.captured = nil
	for _, w := range h.queue {
		if w.timer {
			continue // timer state travels in Timers; missed ticks fire on the target
		}
		req := proto.Clone(w.req).(*pb.CallRequest)
		w.relayer = target
		req.Requester = n.requester(n.routes.add(w))
		ps.Queued = append(ps.Queued, req)
		h.captured = append(h.captured, w)
	}
	h.queue = nil
	return ps, state, nil
}

// reopen puts h back in service after an aborted relocation: captured, then
// boundary, then held requests, in the order they were accepted.
func (n *Node) reopen(h *hosted, rec record.Snapshot) {
	h.mu.Lock()
	ws := append(append(append([]*work(nil), h.captured...), h.boundary...), h.held...)
	h.captured, h.boundary, h.held = nil, nil, nil
	h.mode = modeServing
	h.fence, h.version = rec.Fence(), rec.StoreVersion
	h.queue = append(ws, h.queue...)
	start := len(h.queue) > 0 && !h.running && !h.closed
	if start {
		h.running = true
	}
	h.mu.Unlock()
	for _, w := range ws {
		n.unroute(w)
		w.route = 0
	}
	n.cache.Observe(rec)
	if start {
		n.work.Add(1)
		go h.drain()
	}
	h.arm()
}

// drop discards the source's copy after the target committed: captured and
// the first applied boundary requests wait for their relayed replies (or
// their callers' retries); the rest are redirected to the new owner.
func (n *Node) drop(h *hosted, committed record.Snapshot, applied int) {
	n.cache.Observe(committed)
	n.rememberMove(h.name, committed.Record.Node.Address)
	n.unhost(h)
	h.mu.Lock()
	h.closed = true
	if h.timer != nil {
		h.timer.Stop()
	}
	relayed := append([]*work(nil), h.captured...)
	var redirect []*work
	for i, w := range h.boundary {
		if i < applied {
			relayed = append(relayed, w)
		} else {
			redirect = append(redirect, w)
		}
	}
	redirect = append(redirect, h.held...)
	redirect = append(redirect, h.queue...)
	h.captured, h.boundary, h.held, h.queue = nil, nil, nil, nil
	h.mu.Unlock()
	hint := n.notOwner(committed)
	for _, w := range redirect {
		n.unroute(w)
		h.answer(w, hint)
	}
	// Relayed replies normally arrive within milliseconds; a caller whose
	// reply is lost is answered Unavailable after a bound and retries with
	// the same operation id (the target's table answers it).
	if len(relayed) > 0 {
		n.work.Add(1)
		go func() {
			defer n.work.Done()
			t := time.NewTimer(n.cfg.RelayWait)
			defer t.Stop()
			select {
			case <-t.C:
			case <-n.stopping: // a stopping node answers at once
			}
			for _, w := range relayed {
				if pw, _ := n.routes.take(w.route); pw != nil {
					h.answer(pw, &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE, Message: "reply of a relocated request was not relayed in time; retry with the same operation id"})
				}
			}
		}()
	}
}

// unhost removes h from the hosted objects if it is still the one registered.
func (n *Node) unhost(h *hosted) {
	n.mu.Lock()
	if n.objects[h.name] == h {
		delete(n.objects, h.name)
		n.metrics.hosted.Dec()
	}
	n.mu.Unlock()
}

// failAll answers every pending request of h with code: the object was lost.
func (n *Node) failAll(h *hosted, code pb.Code, msg string) {
	n.unhost(h)
	h.mu.Lock()
	h.closed = true
	ws := append(append(append(append([]*work(nil), h.captured...), h.boundary...), h.held...), h.queue...)
	h.captured, h.boundary, h.held, h.queue = nil, nil, nil, nil
	h.mu.Unlock()
	for _, w := range ws {
		n.unroute(w)
		h.answer(w, &pb.CallReply{Code: code, Message: msg})
	}
}

// ---------------------------------------------------------------- target

// Relocate (PeerService) is the target side of one relocation attempt.
func (s *peerServer) Relocate(stream rpcpb.PeerService_RelocateServer) error {
	n := s.n
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	p := first.GetPrepare()
	if p == nil {
		n.metrics.lateFrames.Inc()
		return errProtocol("the first frame of a relocation stream must be PREPARE")
	}
	id, err := wire.ParseRelocationIDBytes(p.GetRelocationId())
	if err != nil {
		return errProtocol(err.Error())
	}
	if ans, ok := n.tombstones.answer(id, relocation.Fingerprint(p)); ok {
		n.metrics.lateFrames.Inc()
		return stream.Send(ans)
	}
	busy, dup, release := n.incoming.admit(&n.cfg, id, p.GetCoordinator().GetOwnerId(), p.GetPayloadLength())
	defer release()
	t := relocation.NewTarget(relocation.TargetConfig{Self: n.self, SelfRoutingID: n.rid, AppVersion: n.cfg.ApplicationVersion,
		FallbackMs: n.cfg.CutoverFallback.Milliseconds(), Alloc: allocPayload, MaxDeadlineMs: (n.cfg.RelocationTimeout + MaxClockSkew).Milliseconds()})
	ev := relocation.PrepareEvent{Prepare: p, NowMs: n.now().UnixMilli(), Draining: n.draining.Load(), Busy: busy, Duplicate: dup}
	if n.tls != nil {
		ev.Peer = peerNode(stream.Context()) // authorize let only nodes in
	}
	if busy != "" || dup {
		// Refused before anything is staged or tracked: the machine's
		// answer goes back and the stream ends.
		n.metrics.stagesRefused.WithLabelValues(map[bool]string{true: "duplicate", false: "busy"}[dup]).Inc()
		acts, _ := t.Step(ev)
		for _, a := range acts {
			if s, ok := a.(relocation.Send); ok {
				_ = stream.Send(s.Frame)
			}
		}
		return nil
	}
	rec := n.track(&pb.RelocationStatus{RelocationId: id[:], Object: participantName(p), Source: fmt.Sprintf("%s@%d", p.GetCoordinator().GetOwnerId(), p.GetCoordinator().GetOwnerGeneration()),
		Target: n.self.String(), Role: "target", Phase: t.Phase().String(), StartedUnixMs: n.now().UnixMilli(), PayloadBytes: p.GetPayloadLength()})
	defer n.untrack(rec)
	r := &targetRun{n: n, m: t, rec: rec, stream: stream, events: make(chan relocation.Event, 64)}
	return r.run(ev)
}

func participantName(p *pb.Prepare) string {
	if len(p.GetParticipants()) == 0 {
		return ""
	}
	return p.GetParticipants()[0].GetObject()
}

type targetRun struct {
	n *Node
	m *relocation.Target
	// release undoes what the stage holds until it ends (an Actor Join's
	// lock on its group, groups.go).
	release []func()
	// joinSeen: the group record an Actor Join's commit compared.
	joinSeen *authority.Snapshot
	rec      *relocationRecord
	stream   rpcpb.PeerService_RelocateServer
	events   chan relocation.Event
	hidden   []*hosted
	done     bool
	acked    bool // planted ack-before-commit ran the captured and DATA requests already
}

func (r *targetRun) run(first relocation.Event) error {
	n := r.n
	ctx, cancel := context.WithCancel(r.stream.Context())
	defer cancel()
	// The receive goroutine ends when the handler returns (Recv fails once
	// the RPC is over): waiting for it here would hold a finished stage's
	// stream open until the source closes it.
	var wg sync.WaitGroup
	runDone := make(chan struct{})
	defer close(runDone)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			f, err := r.stream.Recv()
			var ev relocation.Event = relocation.Received{Frame: f}
			if err != nil {
				ev = relocation.StreamBroken{Err: err}
			} else if p := f.GetPrepare(); p != nil {
				ev = relocation.PrepareEvent{Prepare: p, NowMs: n.now().UnixMilli(), Draining: n.draining.Load()}
			}
			select {
			case r.events <- ev:
			case <-runDone: // not ctx: a broken stream cancels it, and StreamBroken must still arrive
				return
			}
			if err != nil {
				return
			}
		}
	}()
	tick := time.NewTicker(tickEvery)
	defer tick.Stop()
	var queue []relocation.Action
	step := func(ev relocation.Event) {
		out, err := r.m.Step(ev)
		if err != nil {
			n.log.Warn().Err(err).Str("relocation", r.m.ID().String()).Msg("target step")
		}
		queue = append(queue, out...)
	}
	step(first)
	for {
		for len(queue) > 0 {
			a := queue[0]
			queue = queue[1:]
			for _, ev := range r.do(ctx, a) {
				step(ev)
			}
			if !r.done {
				r.rec.set(func(s *pb.RelocationStatus) { s.Phase = r.m.Phase().String() })
			}
		}
		if r.done {
			n.tombstones.remember(r.m.ID(), r.m.Fingerprint(), r.m.LastAnswer())
			for _, f := range r.release {
				f()
			}
			return nil
		}
		select {
		case ev := <-r.events:
			step(ev)
		case <-tick.C:
			step(relocation.Tick{NowMs: n.now().UnixMilli(), Draining: n.draining.Load()})
		case <-n.stopping:
			step(relocation.Stop{})
		}
	}
}

func (r *targetRun) do(ctx context.Context, a relocation.Action) []relocation.Event {
	n := r.n
	switch a := a.(type) {
	case relocation.Send:
		_ = r.stream.Send(a.Frame) // a broken stream shows up as StreamBroken from Recv
	case relocation.Restore:
		err := r.restore(a.Payload)
		if ferr := failpoint.Hit(failpoint.TargetBeforeReady); err == nil && ferr != nil {
			n.discard(r.hidden)
			r.hidden, err = nil, ferr
		}
		// The restore took time: the machine decides READY on the clock and
		// drain state of now, not of before the restore.
		return []relocation.Event{relocation.Tick{NowMs: n.now().UnixMilli(), Draining: n.draining.Load()}, relocation.Restored{Err: err}}
	case relocation.Commit:
		if !r.acked {
			r.acked = r.ackBeforeCommit(a.Participants)
		}
		if err := failpoint.Hit(failpoint.TargetBeforeCommit); err != nil {
			return []relocation.Event{relocation.CommitResult{Err: err}}
		}
		ev := r.commit(ctx, a.RelocationID, a.Participants, false, a.JoinGroup)
		if err := failpoint.Hit(failpoint.TargetAfterCommit); err != nil {
			return []relocation.Event{relocation.CommitResult{Err: err}} // the reply "was lost": resolve by read-back
		}
		return []relocation.Event{ev}
	case relocation.ResolveCommit:
		time.Sleep(50 * time.Millisecond)
		return []relocation.Event{r.commit(ctx, a.RelocationID, a.Participants, true, a.JoinGroup)}
	case relocation.Admit:
		_ = failpoint.Hit(failpoint.TargetBeforeReplay)
		data := a.Data
		if r.acked {
			data = nil // run before the commit already (planted ack-before-commit)
		}
		n.admit(r.hidden, a.Committed, data, r.m.ID())
		r.hidden = nil
		at := n.now()
		sealed := r.m.Prepare().GetSealedUnixUs()
		r.rec.set(func(s *pb.RelocationStatus) {
			s.AdmittedUnixUs = at.UnixMicro()
			if sealed > 0 && at.UnixMicro() > sealed {
				s.InterruptionUs = at.UnixMicro() - sealed
			}
		})
	case relocation.Discard:
		n.discard(r.hidden)
		r.hidden = nil
	case relocation.Finish:
		r.done = true
		o := a.Outcome.String()
		n.metrics.relocations.WithLabelValues("target", o).Inc()
		r.rec.set(func(s *pb.RelocationStatus) {
			s.Phase, s.Outcome, s.Code, s.Message, s.EndedUnixMs = "done", o, a.Code, a.Message, n.now().UnixMilli()
		})
	}
	return nil
}

// ackBeforeCommit is the planted bug ack-before-commit (internal/failpoint,
// test builds only): the captured and DATA requests run on the hidden
// instances, under the fence the commit is about to write, and their replies
// are relayed before the commit transaction — DESIGN.md §4 step 6 runs them
// only after it. It reports whether it ran anything (admit then skips them).
func (r *targetRun) ackBeforeCommit(ps []record.Snapshot) bool {
	n := r.n
	data := r.m.Data()
	pending := len(data)
	for _, h := range r.hidden {
		h.mu.Lock()
		pending += len(h.captured)
		h.mu.Unlock()
	}
	if pending == 0 || !failpoint.Planted(failpoint.BugAckBeforeCommit) {
		return false
	}
	id := r.m.ID()
	for _, h := range r.hidden {
		for _, p := range ps {
			if p.Object.String() != h.name {
				continue
			}
			planned := authority.Planned(authority.Participant{Expected: p}, n.self, n.selfNode, id.String())
			h.mu.Lock()
			h.fence, h.version = record.Snapshot{Object: p.Object, Record: planned}.Fence(), p.StoreVersion
			h.mu.Unlock()
		}
		h.mu.Lock()
		ws := h.captured
		h.captured = nil
		h.mu.Unlock()
		for _, q := range data {
			if q.GetObject() != h.name {
				continue
			}
			if op, werr := wire.ValidateCall(q); werr == nil {
				ws = append(ws, &work{req: q, op: op, relay: relayOf(q, id[:])})
			}
		}
		for _, w := range ws {
			h.answer(w, h.execute(w))
		}
	}
	return true
}

func (r *targetRun) commit(ctx context.Context, id wire.RelocationID, ps []record.Snapshot, resolve bool, join keyspace.Object) relocation.Event {
	n := r.n
	req := authority.CommitRequest{RelocationID: id.String(), Target: n.self, TargetNode: n.selfNode}
	for _, p := range ps {
		req.Participants = append(req.Participants, authority.Participant{Expected: p})
	}
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !join.IsZero() {
		// Actor Join: the membership is written with the move. The group is
		// this node's and locked by this stage (joinStage), so the record
		// read now is the one the commit compares.
		g, err := r.joinGroup(cctx, join, resolve)
		if err != nil {
			return relocation.CommitResult{Err: err}
		}
		if g.Record.Owner != n.self || g.Record.State != record.StateActive {
			// Not this node's group any more (its owner is fenced): a
			// refused commit, not an uncertain one.
			return relocation.CommitResult{Records: map[string]record.Snapshot{g.Object.String(): g}}
		}
		req.Join = &authority.JoinCommit{Group: g}
	}
	var res authority.CommitResult
	var err error
	if resolve {
		res, err = n.store.ResolveCommit(cctx, req)
	} else {
		res, err = n.store.Commit(cctx, req)
	}
	if err != nil {
		return relocation.CommitResult{Err: err}
	}
	return relocation.CommitResult{Committed: res.Committed, Records: res.Records}
}

// restore decodes the envelope and creates hidden instances: registered, so
// requests for them wait, but admitting nothing until the commit.
func (r *targetRun) restore(payload []byte) error {
	n := r.n
	env, states, err := relocation.DecodePayload(payload)
	if err != nil {
		return err
	}
	if env.GetVersion() != wire.Version || len(env.GetParticipants()) == 0 {
		return fmt.Errorf("%w: envelope version %d with %d participants", relocation.ErrProtocol, env.GetVersion(), len(env.GetParticipants()))
	}
	var made []*hosted
	undo := func() { n.discard(made) }
	if err := r.checkEnvelope(env); err != nil {
		return err
	}
	for i, ps := range env.GetParticipants() {
		obj, err := keyspace.ParseObject(ps.GetParticipant().GetObject())
		if err != nil {
			undo()
			return fmt.Errorf("%w: %v", relocation.ErrProtocol, err)
		}
		if obj.Kind == keyspace.KindGroup {
			continue // a group has no instance: its members are the next participants (groups.go)
		}
		typ, err := n.reg.Lookup(obj.Type)
		if err != nil || !n.hosts[obj.Type] {
			undo()
			return fmt.Errorf("%w: this node does not host type %s", relocation.ErrProtocol, obj.Type)
		}
		h := newHosted(n, obj, typ)
		close(h.ready)
		h.inst = typ.New()
		if err := h.inst.Restore(states[i]); err != nil {
			undo()
			return fmt.Errorf("restore %s: %w", obj, err)
		}
		h.replies, err = actor.DecodeReplyTable(ps.GetReplies())
		if err != nil {
			undo()
			return fmt.Errorf("de-duplication table of %s: %w", obj, err)
		}
		if len(ps.GetTimers()) > 0 {
			if h.timers, err = actor.DecodeTimers(ps.GetTimers()); err != nil {
				undo()
				return fmt.Errorf("timers of %s: %w", obj, err)
			}
		}
		for _, q := range ps.GetQueued() {
			op, werr := wire.ValidateCall(q)
			if werr != nil {
				undo()
				return fmt.Errorf("%w: captured request: %v", relocation.ErrProtocol, werr)
			}
			h.captured = append(h.captured, &work{req: q, op: op, relay: relayOf(q, env.GetRelocationId())})
		}
		h.mode = modeHidden
		if err := n.placeRestored(h); err != nil {
			undo()
			return err
		}
		made = append(made, h)
	}
	r.hidden = made
	return nil
}

// placeRestored registers a restored hidden instance. The object may still be
// here as the sealed source copy of the relocation that just moved it away
// (an Actor Join answers at READY, so a group move can follow at once): that
// copy is dropped once its source settles, so it waits for that, up to
// 2 s. Any other copy present is a protocol error.
func (n *Node) placeRestored(h *hosted) error {
	for wait := time.Now().Add(2 * time.Second); ; {
		n.mu.Lock()
		cur, ok := n.objects[h.name]
		if !ok || cur == nil {
			n.objects[h.name] = h
			n.mu.Unlock()
			return nil
		}
		n.mu.Unlock()
		cur.mu.Lock()
		departing := cur.mode == modeBoundary || cur.mode == modeHold
		cur.mu.Unlock()
		if !departing || time.Now().After(wait) {
			return fmt.Errorf("%w: %s is already present on this node", relocation.ErrProtocol, h.name)
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-n.stopping:
			return fmt.Errorf("%w: %s is already present on this node", relocation.ErrProtocol, h.name)
		}
	}
}

func relayOf(q *pb.CallRequest, relocationID []byte) *relayRoute {
	rq := q.GetRequester()
	if rq.GetAddress() == "" || rq.GetReplyRoute() == 0 {
		return nil
	}
	return &relayRoute{address: rq.GetAddress(), route: rq.GetReplyRoute(), relocationID: relocationID, op: q.GetOperationId(), requester: rq}
}

// admit opens the hidden instances after the commit: captured requests, then
// DATA, at the head of the mailbox (replies relayed), then requests that
// waited here; timers resume.
func (n *Node) admit(hs []*hosted, committed map[string]record.Snapshot, data []*pb.CallRequest, id wire.RelocationID) {
	for _, h := range hs {
		snap, ok := committed[h.name]
		if !ok {
			continue
		}
		n.cache.Observe(snap)
		var ws []*work
		ws = append(ws, h.captured...)
		for _, q := range data {
			if q.GetObject() != h.name {
				continue
			}
			op, werr := wire.ValidateCall(q)
			if werr != nil {
				continue
			}
			ws = append(ws, &work{req: q, op: op, relay: relayOf(q, id[:])})
		}
		n.metrics.replayed.Add(float64(len(ws)))
		h.mu.Lock()
		h.fence, h.version = snap.Fence(), snap.StoreVersion
		h.mode = modeServing
		h.queue = append(append(ws, h.waiting...), h.queue...)
		h.captured, h.waiting = nil, nil
		start := len(h.queue) > 0 && !h.running
		if start {
			h.running = true
		}
		h.mu.Unlock()
		n.metrics.hosted.Inc()
		if start {
			n.work.Add(1)
			go h.drain()
		}
		h.arm()
	}
}

// discard drops hidden instances; requests that waited for them are redirected.
func (n *Node) discard(hs []*hosted) {
	for _, h := range hs {
		n.mu.Lock()
		if n.objects[h.name] == h {
			delete(n.objects, h.name)
		}
		n.mu.Unlock()
		h.close()
	}
}

// ---------------------------------------------------------------- tombstones

// tombstones remember finished target stages (bounded), so a late or repeated
// PREPARE gets the same answer and late frames are ignored, never re-applied.
type tombstones struct {
	mu    sync.Mutex
	by    map[wire.RelocationID]tombstone
	order []wire.RelocationID
	max   int
}

type tombstone struct {
	fp     [32]byte
	answer *pb.RelocationFrame
}

func newTombstones(max int) *tombstones {
	return &tombstones{by: map[wire.RelocationID]tombstone{}, max: max}
}

func (t *tombstones) remember(id wire.RelocationID, fp [32]byte, ans *pb.RelocationFrame) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.by[id]; !ok {
		t.order = append(t.order, id)
	}
	t.by[id] = tombstone{fp: fp, answer: ans}
	for len(t.order) > t.max {
		delete(t.by, t.order[0])
		t.order = t.order[1:]
	}
}

func (t *tombstones) answer(id wire.RelocationID, fp [32]byte) (*pb.RelocationFrame, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts, ok := t.by[id]
	if !ok {
		return nil, false
	}
	if ts.fp != fp {
		return &pb.RelocationFrame{Frame: &pb.RelocationFrame_Failed{Failed: &pb.Failed{RelocationId: id[:], Code: pb.Code_CODE_PROTOCOL_ERROR, Message: "PREPARE repeated with other bytes"}}}, true
	}
	if ts.answer == nil {
		return &pb.RelocationFrame{Frame: &pb.RelocationFrame_Failed{Failed: &pb.Failed{RelocationId: id[:], Code: pb.Code_CODE_ALREADY_TERMINAL, Message: "relocation already ended"}}}, true
	}
	return ts.answer, true
}

// SetDraining marks the node as draining: new PREPAREs are refused with
// ShuttingDown before anything is staged, and a target in READY does not
// commit on its own without CUTOVER.
func (n *Node) SetDraining(v bool) { n.draining.Store(v) }
