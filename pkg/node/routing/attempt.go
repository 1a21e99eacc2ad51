package routing

import (
	"context"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/placement"
	"github.com/meshloc/meshloc/pkg/tracing"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// attempt serves or routes the call once. retry says whether the gateway
// should try again (a redirect was learnt, or the owner was unreachable).
func (r *Router) attempt(ctx context.Context, obj keyspace.Object, typ actor.Type, op wire.OperationID, req *pb.CallRequest) (*pb.CallReply, bool) {
	name := obj.String()
	here := r.d.Host.Hosts(name)
	if !here && req.GetDirect() {
		if addr, ok := r.d.Moved.To(name, r.now()); ok {
			// A straggler for an object that just moved away is forwarded
			// to the committed owner for a bounded window.
			return r.forward(ctx, obj, addr, req)
		}
	}
	if here || req.GetDirect() {
		return r.d.Host.ServeHere(ctx, obj, typ, op, req)
	}
	addr, self, placed := r.route(obj, typ)
	if self || placed && req.GetMethod() == actor.ReminderMethod && r.d.Host.WakesHere(typ.Name) {
		// A reminder wakes its sleeping (or orphaned) object on the node
		// that fires it: the firings of a shard spread its wakes, and none
		// waits on a placement that still lists a node that died.
		return r.d.Host.ServeHere(ctx, obj, typ, op, req)
	}
	if addr == "" {
		return &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE, Message: "no serving node hosts type " + typ.Name}, true
	}
	return r.forward(ctx, obj, addr, req)
}

// forward sends the call to addr as its owner and returns its reply.
func (r *Router) forward(ctx context.Context, obj keyspace.Object, addr string, req *pb.CallRequest) (*pb.CallReply, bool) {
	if req.GetHops() >= wire.MaxHops {
		return &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE, Message: "request forwarded too often"}, false
	}
	fwd := &pb.CallRequest{
		Version: req.GetVersion(), Object: req.GetObject(), Method: req.GetMethod(), Args: req.GetArgs(),
		OperationId: req.GetOperationId(), Requester: req.GetRequester(), Hops: req.GetHops() + 1, Direct: true,
		KnownObjectGeneration: req.GetKnownObjectGeneration(), Sender: req.GetSender(),
		Traceparent: tracing.Carry(req.GetTraceparent()), // a tracing gateway puts its own span's (calltrace.Forward)
	}
	r.d.Forwards.Inc()
	rep, err := r.d.Host.Forward(ctx, addr, fwd)
	if err != nil {
		// The owner may have died: refresh from etcd before the next attempt.
		r.d.Host.Refresh(ctx, obj)
		return &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE, Message: "forward to " + addr + ": " + err.Error()}, true
	}
	switch rep.GetCode() {
	case pb.Code_CODE_NOT_OWNER, pb.Code_CODE_RELOCATING, pb.Code_CODE_UNAVAILABLE, pb.Code_CODE_SHUTTING_DOWN:
		r.d.Host.Refresh(ctx, obj)
		return rep, true
	}
	if rep.GetElsewhere() { // the node placement chose is full: place again
		return rep, true
	}
	if rep.GetFence() != nil && !r.cacheFresh() {
		// An owner's reply is accepted only while this gateway's cache is
		// known fresh, so it holds any newer fence a woken, superseded
		// owner's reply would be refused against. The request ran (or was
		// refused) there; a retry with the same operation id gets the
		// recorded answer.
		return &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE, Message: "gateway's location cache is not known fresh (no etcd progress within the lease TTL): reply not accepted"}, true
	}
	return rep, false
}

// cacheFresh reports whether the location cache is known to hold every
// change committed before a moment less than the lease TTL ago
// (authority.Cache.FreshAt).
func (r *Router) cacheFresh() bool {
	return r.now().Sub(r.d.Cache.FreshAt()) < r.cfg.LeaseTTL
}

// route picks where a call goes: the live owner in the cache, or, for an
// object with no live owner, a serving node chosen by placement.
func (r *Router) route(obj keyspace.Object, typ actor.Type) (addr string, self, placed bool) {
	if loc, ok := r.d.Cache.Lookup(obj); ok && r.d.Dir.Alive(loc.Owner.ID, loc.Owner.Generation) {
		return loc.Node.Address, loc.Owner == r.d.Self, false
	}
	o, ok := r.place(obj, typ)
	if !ok {
		return "", false, true
	}
	return o.Descriptor.Address, o.Descriptor.OwnerID == r.d.Self.ID && o.Generation == r.d.Self.Generation, true
}

// place chooses a serving owner for a new or orphaned object with the
// shared rule of pkg/placement (locationd's recovery controller uses it
// too): among serving owners with weight > 0 that host the type, the two
// ranked highest by a hash of (object, owner) are compared and the one with
// fewer objects per unit of weight wins.
func (r *Router) place(obj keyspace.Object, typ actor.Type) (lease.Owner, bool) {
	owners := r.d.Dir.List()
	cands := make([]placement.Candidate, len(owners))
	for i, o := range owners {
		cands[i] = o.Candidate()
	}
	i, ok := placement.Choose(obj.String(), placement.Need{Types: []string{typ.Name}}, cands, func(c placement.Candidate) int { return r.d.Cache.Count(c.ID) })
	if !ok {
		return lease.Owner{}, false
	}
	return owners[i], true
}

// Route is where a call to obj would go now: the address of its live
// owner, or of the serving node placement would choose ("": none).
func (r *Router) Route(obj keyspace.Object) string {
	typ, err := r.d.Registry.Lookup(obj.Type)
	if err != nil {
		typ = actor.Type{Name: obj.Type}
	}
	addr, _, _ := r.route(obj, typ)
	return addr
}

// KnownType is nil when this node's registry holds type name or a live
// node advertises it, and the registry's error otherwise.
func (r *Router) KnownType(name string) error {
	if _, err := r.d.Registry.Lookup(name); err != nil && !r.advertised(name) {
		return err
	}
	return nil
}
