package node

import (
	"context"
	"errors"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/mtls"
	"github.com/meshloc/meshloc/pkg/node/calltrace"
	"github.com/meshloc/meshloc/pkg/node/internal/hosted"
	"github.com/meshloc/meshloc/pkg/node/reminders"
	"github.com/meshloc/meshloc/pkg/node/routing"
	"github.com/meshloc/meshloc/pkg/tracing"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Call handles one request: validate, then serve it here or route it to the
// owner (pkg/node/routing decides). Bad input is answered with a typed code
// and changes nothing.
func (n *Node) Call(ctx context.Context, req *pb.CallRequest) *pb.CallReply {
	start := n.now()
	ctx, traced := calltrace.Serve(ctx, n.cfg.Name, req)
	rep := n.router.Call(ctx, req)
	calltrace.End(ctx, traced, rep)
	n.metrics.Calls.WithLabelValues(wire.CodeName(rep.GetCode())).Inc()
	tracing.Observe(ctx, n.metrics.CallSeconds, n.now().Sub(start).Seconds())
	return rep
}

// newRouter composes the node's router once etcd, the directory and the
// node's own lease are known (Start).
func (n *Node) newRouter() *routing.Router {
	return routing.New(routing.Config{CallTimeout: n.cfg.CallTimeout, DedupWindow: n.cfg.DedupWindow, LeaseTTL: n.cfg.LeaseTTL},
		routing.Deps{Clock: n.clock, Registry: n.reg, Dir: n.dir, Cache: n.cache, Self: n.self,
			Fences: n.fences, Moved: n.moved, Host: routeHost{n},
			Forwards: n.metrics.Forwards, StaleRefused: n.metrics.StaleRefused})
}

// routeHost is the node as its router sees it.
type routeHost struct{ n *Node }

func (r routeHost) Hosts(name string) bool {
	r.n.mu.Lock()
	defer r.n.mu.Unlock()
	return r.n.objects[name] != nil
}

func (r routeHost) ServeHere(ctx context.Context, obj keyspace.Object, typ actor.Type, op wire.OperationID, req *pb.CallRequest) (*pb.CallReply, bool) {
	return r.n.serveHere(ctx, obj, typ, op, req)
}

func (r routeHost) CallGroup(ctx context.Context, g keyspace.Object, req *pb.CallRequest) *pb.CallReply {
	return r.n.callGroup(ctx, g, req) // groups_relocate.go
}

func (r routeHost) Forward(ctx context.Context, addr string, req *pb.CallRequest) (*pb.CallReply, error) {
	calltrace.Forward(ctx, req)
	return r.n.peers.Call(ctx, addr, req)
}

func (r routeHost) SessionCaller(ctx context.Context, rs *pb.SessionRef) bool {
	return r.n.tls == nil || mtls.PeerNode(ctx) == rs.GetGatewayId()
}

// NodeCaller: this node's own call, or (under mutual TLS) a node's: only
// nodes fire reminders.
func (r routeHost) NodeCaller(ctx context.Context) bool {
	return r.n.tls == nil || reminders.Own(ctx) || mtls.PeerNode(ctx) != ""
}

func (r routeHost) WakesHere(t string) bool {
	return r.n.hosts[t] && r.n.serving.Load() && !r.n.env.Full()
}
func (r routeHost) CallServed() { r.n.pacing.CallServed() }

func (r routeHost) Refresh(ctx context.Context, obj keyspace.Object) {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if snap, err := r.n.store.Read(rctx, obj); err == nil {
		r.n.cache.Observe(snap)
	}
}

// serveHere runs the call on this node as the owner (activating or
// recovering it if etcd allows), or answers with a redirect.
func (n *Node) serveHere(ctx context.Context, obj keyspace.Object, typ actor.Type, op wire.OperationID, req *pb.CallRequest) (*pb.CallReply, bool) {
	h, rep := n.hostedOrActivate(ctx, obj, typ)
	if rep != nil {
		return rep, wire.RetryReply(rep)
	}
	tr := hosted.TraceOf(ctx)
	if r, ok := h.RunInline(&hosted.Work{Req: req, Op: op, Trace: tr}); ok {
		return beforeReply(r), false
	}
	w := &hosted.Work{Req: req, Op: op, Done: make(chan *pb.CallReply, 1), Trace: tr}
	if !h.Submit(w) {
		return n.notHere(obj), true
	}
	select {
	case r := <-w.Done:
		return beforeReply(r), false
	case <-ctx.Done():
		// The request stays queued and will run; the caller retries with the
		// same operation id and gets the recorded reply.
		return &pb.CallReply{Code: pb.Code_CODE_DEADLINE_EXCEEDED, Message: "deadline passed waiting for " + obj.String()}, false
	}
}

// Fence is the newest fence this node has seen for an object, its two
// generations (tests).
func (n *Node) Fence(obj keyspace.Object) (authority.Fence, bool) {
	return n.fences.Newest(obj.String())
}

// rememberMove notes that object name moved to addr: stragglers are
// forwarded there for --forward-window.
func (n *Node) rememberMove(name, addr string) { n.moved.Remember(name, addr, n.now()) }

var errNotImplemented = errors.New("node: not implemented yet")
