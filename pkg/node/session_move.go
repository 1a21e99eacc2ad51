package node

import (
	"context"
	"sync"
	"time"

	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/session"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Sessions move with their object. Before the capture the source seals
// every bound session at its gateway (which then keeps the client's calls)
// and stops delivering; the journals travel in the payload; after the
// commit the target routes each session to itself at its gateway (which
// sends it the kept calls), after an abort the source routes them back.
//
// The seal is an ordering courtesy, not a safety fence: a call a gateway
// forwards to the source after the seal is queued by the sealed mailbox
// and executed once, on whichever side ends up owning the object. So a
// gateway that does not answer the seal in time does not stop the move; it
// finds the object by binding again (its seal times out, or its call is
// redirected).

// Session move bounds.
const (
	sessionSealWait = 2 * time.Second
	routeAttempts   = 3
	routeBackoff    = 100 * time.Millisecond
)

// sealSessions seals every session bound to the units before the seal of
// the mailbox: no delivery from now on, and each gateway told, answers
// awaited at most sessionSealWait.
func (m *sourceMailbox) sealSessions(ctx context.Context) {
	n := m.n
	type seal struct {
		h   *hosted
		ref session.Ref
	}
	var seals []seal
	for _, h := range m.units {
		h.mu.Lock()
		for _, b := range h.sessions {
			b.sealed = true
			seals = append(seals, seal{h, b.j.Gateway})
		}
		h.mu.Unlock()
	}
	if len(seals) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, sessionSealWait)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range seals {
		fence := n.wireFence(s.h.fence, s.h.version, n.rid.Hex())
		wg.Go(func() {
			req := &pb.SessionSealRequest{RelocationId: m.id[:], Object: s.h.name, Fence: fence, Session: s.ref.Proto(),
				TargetId: m.target, TargetGeneration: m.targetGen}
			code := n.seams.sessionSeal(ctx, s.ref, req)
			n.metrics.SessionsSealed.WithLabelValues(wire.CodeName(code)).Inc()
		})
	}
	wg.Wait()
}

// sessionJournalsLocked is the sessions' part of the capture (h.mu held).
func (h *hosted) sessionJournalsLocked() []*pb.SessionJournal {
	out := make([]*pb.SessionJournal, 0, len(h.sessions))
	for _, b := range h.sessions {
		out = append(out, b.j.Proto())
	}
	return out
}

// restoreSessions takes the journals of a payload into a hidden instance,
// sealed until its admission.
func (h *hosted) restoreSessions(js []*pb.SessionJournal) error {
	for _, m := range js {
		j, err := session.JournalOf(m)
		if err != nil {
			return err
		}
		if h.sessions == nil {
			h.sessions = map[session.ID]*boundSession{}
		}
		h.sessions[j.Gateway.Session] = &boundSession{j: j, sealed: true, gwHas: j.AckedPush}
	}
	return nil
}

// routeSessions binds every session of h anew (h's owner now: the target
// after a commit, the source after an abort) and tells its gateway, on
// goroutines of the node's; then deliveries resume.
func (h *hosted) routeSessions(relocationID []byte, commit bool) {
	n := h.n
	h.mu.Lock()
	type route struct {
		b   *boundSession
		req *pb.SessionRouteRequest
	}
	var routes []route
	fence := n.wireFence(h.fence, h.version, n.rid.Hex())
	for _, b := range h.sessions {
		b.j.Rebind()
		b.sealed = false
		routes = append(routes, route{b, &pb.SessionRouteRequest{RelocationId: relocationID, Object: h.name, Commit: commit,
			Fence: fence, Address: n.selfNode.Address, Session: b.j.Gateway.Proto()}})
	}
	h.mu.Unlock()
	for _, r := range routes {
		n.work.Go(func() {
			code := n.seams.sessionRoute(r.b.j.Gateway, r.req)
			n.metrics.SessionsRouted.WithLabelValues(wire.CodeName(code)).Inc()
			if code == pb.Code_CODE_OK {
				h.deliver(r.b)
			}
		})
	}
}

// sendSeal sends a seal once, within ctx.
func (n *Node) sendSeal(ctx context.Context, ref session.Ref, req *pb.SessionSealRequest) pb.Code {
	r, err := sessionRPCCtx(ctx, n, ref, func(ctx context.Context, c rpcpb.PeerServiceClient) (*pb.SessionSealReply, error) {
		return c.SessionSeal(ctx, req)
	})
	if err != nil {
		return wire.CodeOf(err)
	}
	return r.GetCode()
}

// sendRoute sends a route, again after an error (a few times: a gateway
// that stays out of reach binds again when its seal times out).
func (n *Node) sendRoute(ref session.Ref, req *pb.SessionRouteRequest) pb.Code {
	for attempt := range routeAttempts {
		r, err := sessionRPC(n, ref, func(ctx context.Context, c rpcpb.PeerServiceClient) (*pb.SessionRouteReply, error) {
			return c.SessionRoute(ctx, req)
		})
		if err == nil {
			return r.GetCode()
		}
		if !clock.Sleep(n.clock, time.Duration(attempt+1)*routeBackoff, n.life.Done()) {
			break
		}
	}
	return pb.Code_CODE_UNAVAILABLE
}

// sessionRPCCtx is sessionRPC within ctx.
func sessionRPCCtx[R any](ctx context.Context, n *Node, ref session.Ref, call func(context.Context, rpcpb.PeerServiceClient) (R, error)) (R, error) {
	return sessionRPC(n, ref, func(c2 context.Context, c rpcpb.PeerServiceClient) (R, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(c2, cancel)
		defer stop()
		return call(ctx, c)
	})
}
