// Package routing owns a gateway's decisions about one call: what every
// owner would refuse anyway (answered before anything is routed, activated
// or written), where the call goes (served here, forwarded to where a
// straggler's object just moved, to the owner the location cache names, or
// to a serving node placement chooses), the bounded retry loop with its
// backoff, and the newest fence seen per object, against which a
// superseded owner's reply is refused.
//
// Routing holds no object and dials nothing: the node serves a call here
// and forwards one to a peer through Host.
package routing

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// MaxAttempts bounds how often one call follows a redirect or retries an
// unavailable owner before answering the caller.
const MaxAttempts = 8

// Host is the node as routing sees it.
type Host interface {
	// Hosts reports whether object name is hosted here now.
	Hosts(name string) bool
	// ServeHere runs the call here as the owner (activating or recovering
	// the object if etcd allows) or answers with a redirect; retry says
	// whether the gateway should try again.
	ServeHere(ctx context.Context, obj keyspace.Object, typ actor.Type, op wire.OperationID, req *pb.CallRequest) (rep *pb.CallReply, retry bool)
	// CallGroup answers a call to a group.
	CallGroup(ctx context.Context, g keyspace.Object, req *pb.CallRequest) *pb.CallReply
	// Forward sends req to the node at addr, an address etcd names.
	Forward(ctx context.Context, addr string, req *pb.CallRequest) (*pb.CallReply, error)
	// SessionCaller reports whether the caller of ctx may speak for the
	// session that req names (only its gateway may, under mutual TLS).
	SessionCaller(ctx context.Context, rs *pb.SessionRef) bool
	// NodeCaller reports whether the caller of ctx is a node (a reminder's
	// firing comes only from one).
	NodeCaller(ctx context.Context) bool
	// WakesHere reports whether this node takes new objects of type t now
	// (it hosts t, serves, and is not full).
	WakesHere(t string) bool
	// Refresh re-reads obj's record from etcd into the location cache, so
	// the next attempt routes on fresh data.
	Refresh(ctx context.Context, obj keyspace.Object)
	// CallServed notes foreground work, for the pacing of background
	// relocations.
	CallServed()
}

// Config is what routing takes from the node's settings.
type Config struct {
	CallTimeout time.Duration // a call's deadline when its caller set none nearer
	DedupWindow time.Duration // how old an operation id may be
	LeaseTTL    time.Duration // how stale the location cache may be for a reply to count
}

// Deps are the node's parts routing reads.
type Deps struct {
	Clock    clock.Clock
	Registry *actor.Registry
	Dir      *lease.Directory
	Cache    *authority.Cache
	Self     authority.OwnerRef
	Fences   *Fences
	Moved    *Moved
	Host     Host
	// Forwards counts calls forwarded to another node; StaleRefused
	// replies refused for an older fence than one already seen.
	Forwards, StaleRefused prometheus.Counter
}

// Router routes the calls a node receives.
type Router struct {
	cfg Config
	d   Deps
}

// New makes a router.
func New(cfg Config, d Deps) *Router { return &Router{cfg: cfg, d: d} }

func (r *Router) now() time.Time { return r.d.Clock.Now() }

// Call handles one request: validate, then serve it here or route it to
// the owner. Bad input is answered with a typed code and changes nothing.
func (r *Router) Call(ctx context.Context, req *pb.CallRequest) *pb.CallReply {
	r.d.Host.CallServed()
	op, werr := wire.ValidateCall(req)
	if werr != nil {
		return &pb.CallReply{Code: werr.Code, Message: werr.Message}
	}
	if rs := req.GetSession(); rs != nil && !r.d.Host.SessionCaller(ctx, rs) {
		// Only a session's gateway speaks for it.
		return &pb.CallReply{Code: pb.Code_CODE_PERMISSION_DENIED, Message: "a session call from another node than its gateway"}
	}
	if req.GetMethod() == actor.ReminderMethod && !r.d.Host.NodeCaller(ctx) {
		return &pb.CallReply{Code: pb.Code_CODE_PERMISSION_DENIED, Message: "a reminder's firing from a client: only a node fires reminders"}
	}
	obj, err := keyspace.ParseObject(req.GetObject())
	if err != nil {
		code := pb.Code_CODE_INVALID_ARGUMENT
		if o := SplitKind(req.GetObject()); o != keyspace.KindActor && o != keyspace.KindGroup {
			code = pb.Code_CODE_UNKNOWN_KIND
		}
		return &pb.CallReply{Code: code, Message: err.Error()}
	}
	if obj.Kind == keyspace.KindGroup {
		return r.d.Host.CallGroup(ctx, obj, req) // "members" only
	}
	typ, err := r.d.Registry.Lookup(obj.Type)
	if err != nil {
		// Not a type of this node's registry: a gateway still routes it
		// when a live node advertises it (a program of its own that embeds
		// pkg/node); that owner checks the method.
		if !r.advertised(obj.Type) {
			return &pb.CallReply{Code: pb.Code_CODE_UNKNOWN_TYPE, Message: fmt.Sprintf("%s: no node hosts type %q (the cluster's types: %s)",
				actor.ErrUnknownType, obj.Type, strings.Join(r.clusterTypes(), ", "))}
		}
		typ = actor.Type{Name: obj.Type}
	}
	if rep := r.refuseEarly(typ, req.GetMethod(), op); rep != nil {
		return rep
	}
	ctx, cancel := withCallTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	name := obj.String()
	var last *pb.CallReply
	backoff := 10 * time.Millisecond
	for attempt := range MaxAttempts {
		if attempt > 0 {
			if !clock.Sleep(r.d.Clock, backoff, ctx.Done()) {
				break
			}
			backoff = min(backoff*2, 500*time.Millisecond)
		}
		rep, retry := r.attempt(ctx, obj, typ, op, req)
		if rep != nil && rep.GetFence() != nil && !r.d.Fences.Accept(name, rep.GetFence()) {
			// A superseded owner answered: its state is abandoned, so the
			// request is sent again to the current owner (same operation id).
			r.d.StaleRefused.Inc()
			rep, retry = &pb.CallReply{Code: pb.Code_CODE_STALE_FENCE, Message: "refused a reply from " + rep.GetFence().GetOwnerId() + " older than a fence already seen for " + name}, true
			r.d.Host.Refresh(ctx, obj)
		}
		if !retry || req.GetDirect() {
			return rep
		}
		last = rep
	}
	if last == nil {
		last = &pb.CallReply{Code: pb.Code_CODE_DEADLINE_EXCEEDED, Message: "call deadline passed while routing " + name}
	}
	return last
}

// withCallTimeout bounds ctx by d from now, unless its deadline is that
// near already (a client's call carries its own, a gateway's forward the
// time left): then that deadline bounds the call and no timer is made. A
// timer per call was 2% of the CPU of 64 callers through a gateway.
// Deadlines are the wall clock's, as context.WithTimeout's.
func withCallTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// refuseEarly answers a request that every owner would refuse without
// running it: a method its type does not list, an operation id outside the
// de-duplication window. It is answered here, before anything is routed,
// activated or written: a refused request creates no record in etcd.
func (r *Router) refuseEarly(typ actor.Type, method string, op wire.OperationID) *pb.CallReply {
	if !typ.HasMethod(method) { // a foreign type lists none: its owner checks
		return &pb.CallReply{Code: pb.Code_CODE_UNKNOWN_METHOD, Message: actor.UnknownMethodOf(typ, method).Error()}
	}
	if err := actor.CheckOperationTime(op, r.now(), r.cfg.DedupWindow); err != nil {
		return &pb.CallReply{Code: actor.CodeOf(err), Message: err.Error()}
	}
	return nil
}

// advertised reports whether a live owner's descriptor lists type t.
func (r *Router) advertised(t string) bool {
	for _, o := range r.d.Dir.List() {
		if slices.Contains(o.Descriptor.Types, t) {
			return true
		}
	}
	return false
}

// clusterTypes lists the types this node and every live node host, sorted.
func (r *Router) clusterTypes() []string {
	types := r.d.Registry.Names()
	for _, o := range r.d.Dir.List() {
		for _, t := range o.Descriptor.Types {
			if !slices.Contains(types, t) {
				types = append(types, t)
			}
		}
	}
	slices.Sort(types)
	return types
}

// SplitKind is the kind part of an object name (all of it without a '/').
func SplitKind(s string) string {
	kind, _, _ := strings.Cut(s, "/")
	return kind
}
