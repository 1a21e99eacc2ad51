package node

import (
	"context"
	"fmt"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/node/config"
	"github.com/meshloc/meshloc/pkg/node/internal/hosted"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/session"
	"github.com/meshloc/meshloc/pkg/statestore"
	"github.com/meshloc/meshloc/pkg/statestore/postgres"
	"github.com/meshloc/meshloc/pkg/tracing"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The node's objects live in internal/hosted: each one's mailbox, instance,
// timers, outbox, sessions and durable write path. What an object asks of
// its node goes through objectHost (hosted.Node); what they share is the
// node's hosted.Env, made once the node knows its identity (Start).

// hostEnv makes the objects' environment (Start, once the store, cache and
// this node's address are known).
func (n *Node) hostEnv() (*hosted.Env, error) {
	n.state = statestore.NewEtcd(n.store, n.cfg.DurableMaxBytes)
	open := n.opts.State
	if open == nil && config.UsesPostgres(n.cfg.StateStore) {
		open = postgres.Opener(n.cfg.StateStore)
	}
	if open != nil {
		var err error
		if n.state, err = open(n.life, n.store); err != nil {
			return nil, fmt.Errorf("node: state store: %w", err)
		}
	}
	n.state = stateStore(n.state)
	return hosted.NewEnv(hosted.Deps{Config: &n.cfg, Metrics: n.metrics, Log: n.log, Clock: n.clock, Work: &n.work,
		ExecLog: n.xlog, Store: n.store, State: n.state, Cache: n.cache, Self: n.self, SelfNode: n.selfNode, RoutingID: n.rid,
		Life: n.life, Stopping: n.stopping, Outboxes: n.outboxes, Traffic: n.traffic, KnownGeneration: knownGeneration,
		WriteBehind: writeBehind, Node: objectHost{n}}), nil
}

// objectHost is the node as its objects see it (hosted.Node).
type objectHost struct{ n *Node }

func (o objectHost) LeaseStatus(now time.Time) lease.Status         { return o.n.leaseStatus(now) }
func (o objectHost) NotHere(obj keyspace.Object) *pb.CallReply      { return o.n.notHere(obj) }
func (o objectHost) NotOwner(snap authority.Snapshot) *pb.CallReply { return o.n.notOwner(snap) }
func (o objectHost) NoSpaceReply(msg string) *pb.CallReply          { return o.n.noSpaceReply(msg) }
func (o objectHost) Unroute(w *hosted.Work)                         { o.n.unroute(w) }
func (o objectHost) TakeRoute(route uint64) *hosted.Work            { return o.n.routes.Take(route) }
func (o objectHost) HandOver(w *hosted.Work, target string) *pb.CallRequest {
	return o.n.handOver(w, target)
}
func (o objectHost) RelayReply(w *hosted.Work, r *pb.CallReply)     { o.n.seams.relayReply(w, r) }
func (o objectHost) Unhost(h *hosted.Object)                        { o.n.unhost(h) }
func (o objectHost) NoteChange()                                    { o.n.noteChange() }
func (o objectHost) RememberMove(name, addr string)                 { o.n.rememberMove(name, addr) }
func (o objectHost) CheckSender(ms *pb.MessageSender) *pb.CallReply { return o.n.checkSender(ms) }
func (o objectHost) SetFull(full bool) {
	o.n.work.Go(func() { // the descriptor's write waits for etcd; the sweep does not
		if _, err := o.n.keeper.Update(o.n.life, func(d *lease.Descriptor) { d.Full = full }); err != nil {
			o.n.log.Warn().Err(err).Bool("full", full).Msg("owner descriptor not updated")
		}
	})
}
func (o objectHost) NotOwnerAt(obj keyspace.Object, loc record.Location) *pb.CallReply {
	return o.n.notOwnerAt(obj, loc)
}
func (o objectHost) SendMessage(m actor.OutMessage, from *pb.MessageSender) *pb.CallReply {
	return o.n.seams.sendMessage(m, from)
}
func (o objectHost) SessionSeal(ctx context.Context, ref session.Ref, req *pb.SessionSealRequest) pb.Code {
	return o.n.seams.sessionSeal(ctx, ref, req)
}
func (o objectHost) SessionRoute(ref session.Ref, req *pb.SessionRouteRequest) pb.Code {
	return o.n.seams.sessionRoute(ref, req)
}
func (o objectHost) DeliverPushes(ref session.Ref, m *pb.SessionDelivery) (*pb.SessionDeliveryReply, error) {
	return sessionRPC(o.n, ref, func(ctx context.Context, c rpcpb.PeerServiceClient) (*pb.SessionDeliveryReply, error) {
		return c.SessionDeliver(ctx, m)
	})
}

// wireFence is hosted.WireFence.
func (n *Node) wireFence(f authority.Fence, storeVersion int64, rid string) *pb.Fence {
	return hosted.WireFence(f, storeVersion, rid)
}

func unavailable(what string, err error) *pb.CallReply { return hosted.Unavailable(what, err) }

// typeRef is the one copy of t that the node's objects of its type point
// to (a copy in each of a million objects costs 64 MB).
func (n *Node) typeRef(t actor.Type) *actor.Type {
	if p, ok := n.types.Load(t.Name); ok {
		return p.(*actor.Type)
	}
	p, _ := n.types.LoadOrStore(t.Name, &t)
	return p.(*actor.Type)
}

// checkSender is the destination's check of a message's sender (on its
// mailbox, before the message runs): a sender that its record shows
// re-created under a newer object generation sent it from a life that
// ended; the message is refused as stale (the new life, if it has the
// message, sends it again). It returns the refusal, or nil.
func (n *Node) checkSender(ms *pb.MessageSender) *pb.CallReply {
	obj, err := keyspace.ParseObject(ms.GetObject())
	if err != nil || obj.Kind != keyspace.KindActor {
		return &pb.CallReply{Code: pb.Code_CODE_INVALID_ARGUMENT, Message: fmt.Sprintf("a message from %q, which is not an actor", ms.GetObject())}
	}
	loc, ok := n.cache.Lookup(obj)
	if !ok || loc.ObjectGeneration <= ms.GetFence().GetObjectGeneration() {
		return nil
	}
	n.metrics.Messages.StaleSenders.Inc()
	// No fence: the sender must not take this for a superseded owner.
	return &pb.CallReply{Code: pb.Code_CODE_STALE_FENCE, Message: fmt.Sprintf("a message from %s under object generation %d, re-created since with %d",
		ms.GetObject(), ms.GetFence().GetObjectGeneration(), loc.ObjectGeneration)}
}

// sendMessage delivers one message like a call: routed by this node (to
// itself when it owns the destination), following redirects, with the
// message's operation id and the sender's fence.
func (n *Node) sendMessage(m actor.OutMessage, from *pb.MessageSender) *pb.CallReply {
	ctx, cancel := context.WithTimeout(n.stopCtx, n.cfg.CallTimeout)
	defer cancel()
	req := &pb.CallRequest{Version: wire.Version, Object: m.To, Method: m.Method, Args: m.Args, OperationId: m.ID[:], Sender: from}
	return n.router.Call(tracing.WithTraceparent(ctx, m.Trace), req) // a forward carries it on (calltrace.Forward)
}

// outboxGauges is what the message gauges read when scraped.
type outboxGauges struct{ n *Node }

func (g outboxGauges) OutboxStats() (int, time.Duration) { return g.n.outboxes.Stats(g.n.now()) }
func (g outboxGauges) CrossNodeRatio() float64           { return g.n.traffic.CrossRatio(g.n.now()) }
