package hosted

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/node/config"
	"github.com/meshloc/meshloc/pkg/node/execlog"
	"github.com/meshloc/meshloc/pkg/node/nodemetrics"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/session"
	"github.com/meshloc/meshloc/pkg/statestore"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Node is what an object asks of the node that hosts it: the node's
// lease, its routing of calls and replies, and its table of hosted objects.
// The node's seams (relays, messages, session routes) are behind it, so a
// test build's faults wrap them where the node made them.
type Node interface {
	// LeaseStatus is the node's owner lease as of now.
	LeaseStatus(now time.Time) lease.Status
	// NotHere, NotOwner and NotOwnerAt are the node's redirects.
	NotHere(obj keyspace.Object) *pb.CallReply
	NotOwner(snap authority.Snapshot) *pb.CallReply
	NotOwnerAt(obj keyspace.Object, loc record.Location) *pb.CallReply
	// NoSpaceReply is the answer while etcd's space alarm is raised.
	NoSpaceReply(msg string) *pb.CallReply
	// Unroute forgets the reply route of w; TakeRoute takes the request
	// waiting on route (nil: answered already); HandOver makes w's request
	// for target, its caller waiting here for the relayed reply.
	Unroute(w *Work)
	TakeRoute(route uint64) *Work
	HandOver(w *Work, target string) *pb.CallRequest
	// RelayReply sends the reply of a relocated request to its requester.
	RelayReply(w *Work, r *pb.CallReply)
	// Unhost removes o from the node's objects; NoteChange says they
	// changed; RememberMove notes where an object went, for stragglers.
	Unhost(o *Object)
	NoteChange()
	RememberMove(name, addr string)
	// SendMessage delivers one message of an outbox; CheckSender is the
	// destination's check of a message's sender (nil: it may run).
	SendMessage(m actor.OutMessage, from *pb.MessageSender) *pb.CallReply
	CheckSender(ms *pb.MessageSender) *pb.CallReply
	// SetFull says whether the node is at a memory limit (pressure.go):
	// its owner descriptor says so, and placement passes it by.
	SetFull(full bool)
	// DeliverPushes sends pushes to a session's gateway; SessionSeal asks it
	// to hold the client's calls before a move; SessionRoute tells it where
	// its object is after a move.
	DeliverPushes(ref session.Ref, m *pb.SessionDelivery) (*pb.SessionDeliveryReply, error)
	SessionSeal(ctx context.Context, ref session.Ref, req *pb.SessionSealRequest) pb.Code
	SessionRoute(ref session.Ref, req *pb.SessionRouteRequest) pb.Code
}

// Deps are what NewEnv needs: the node's settings, services and identity,
// all known once the node started.
type Deps struct {
	Config    *config.Config
	Metrics   *nodemetrics.Node
	Log       zerolog.Logger
	Clock     clock.Clock
	Work      *sync.WaitGroup // the node's work: mailbox drains, timers, deliveries, relays
	ExecLog   *execlog.Log    // nil: off
	Store     *authority.Store
	State     statestore.Store // where durable objects' state lives
	Cache     *authority.Cache
	Self      authority.OwnerRef
	SelfNode  authority.NodeRef
	RoutingID wire.RoutingID
	Life      context.Context // ends at the node's teardown
	Stopping  <-chan struct{} // closed when the node begins to stop
	Outboxes  *OutboxSet
	Traffic   *Traffic // the messages answered, for co-location
	// KnownGeneration is a call's known object generation (a test build
	// plants a bug there).
	KnownGeneration func(*pb.CallRequest) int64
	// WriteBehind reports whether durable changes are acknowledged before
	// they are written and sleeps do not wait for them (a test build
	// plants the bug sleep-before-persist there; nil: never).
	WriteBehind func() bool
	Node        Node
}

// Env is what every object of one node shares.
type Env struct {
	cfg             *config.Config
	metrics         *nodemetrics.Node
	log             zerolog.Logger
	clock           clock.Clock
	work            *sync.WaitGroup
	xlog            *execlog.Log
	store           *authority.Store
	state           statestore.Store
	cache           *authority.Cache
	self            authority.OwnerRef
	selfNode        authority.NodeRef
	rid             wire.RoutingID
	life            context.Context
	stopping        <-chan struct{}
	outboxes        *OutboxSet
	traffic         *Traffic
	knownGeneration func(*pb.CallRequest) int64
	writeBehind     func() bool
	node            Node
	press           pressure
}

// NewEnv is the environment of a node's objects.
func NewEnv(d Deps) *Env {
	n := &Env{cfg: d.Config, metrics: d.Metrics, log: d.Log, clock: d.Clock, work: d.Work, xlog: d.ExecLog,
		store: d.Store, state: d.State, cache: d.Cache, self: d.Self, selfNode: d.SelfNode, rid: d.RoutingID, life: d.Life,
		stopping: d.Stopping, outboxes: d.Outboxes, traffic: d.Traffic, knownGeneration: d.KnownGeneration, writeBehind: d.WriteBehind, node: d.Node}
	if n.writeBehind == nil {
		n.writeBehind = func() bool { return false }
	}
	return n
}

func (n *Env) now() time.Time                                  { return n.clock.Now() }
func (n *Env) leaseStatus(now time.Time) lease.Status          { return n.node.LeaseStatus(now) }
func (n *Env) notHere(obj keyspace.Object) *pb.CallReply       { return n.node.NotHere(obj) }
func (n *Env) notOwner(snap authority.Snapshot) *pb.CallReply  { return n.node.NotOwner(snap) }
func (n *Env) noSpaceReply(msg string) *pb.CallReply           { return n.node.NoSpaceReply(msg) }
func (n *Env) unroute(w *Work)                                 { n.node.Unroute(w) }
func (n *Env) unhost(h *Object)                                { n.node.Unhost(h) }
func (n *Env) noteChange()                                     { n.node.NoteChange() }
func (n *Env) rememberMove(name, addr string)                  { n.node.RememberMove(name, addr) }
func (n *Env) handOver(w *Work, target string) *pb.CallRequest { return n.node.HandOver(w, target) }
func (n *Env) checkSender(ms *pb.MessageSender) *pb.CallReply  { return n.node.CheckSender(ms) }
func (n *Env) notOwnerAt(obj keyspace.Object, loc record.Location) *pb.CallReply {
	return n.node.NotOwnerAt(obj, loc)
}

func (n *Env) wireFence(f authority.Fence, storeVersion int64, rid string) *pb.Fence {
	return WireFence(f, storeVersion, rid)
}

// WireFence is the wire form of fence f of an object served under store
// version storeVersion by the node of routing id rid (hex).
func WireFence(f authority.Fence, storeVersion int64, rid string) *pb.Fence {
	r, _ := wire.ParseRoutingIDHex(rid)
	return &pb.Fence{
		OwnerId: f.Owner.ID, OwnerGeneration: f.Owner.Generation, RoutingId: r[:],
		ObjectGeneration: f.ObjectGeneration, AuthorityGeneration: f.AuthorityGeneration, StoreVersion: storeVersion,
	}
}

// Unavailable is the answer of a call that could not reach etcd (or a peer)
// for what: retryable, with the same operation id.
func Unavailable(what string, err error) *pb.CallReply {
	return &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE, Message: what + ": " + err.Error()}
}
