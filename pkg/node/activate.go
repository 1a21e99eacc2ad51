package node

// Activation: a node hosts an object only once etcd says it may (a create,
// a recovery, or the record naming this node), and forgets it when it no
// longer owns it.

import (
	"context"
	"errors"
	"fmt"

	"github.com/meshloc/meshloc/internal/shrink"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node/internal/hosted"
	"github.com/meshloc/meshloc/pkg/node/reminders"
	"github.com/meshloc/meshloc/pkg/record"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// hostedOrActivate returns the local instance of obj, activating or
// recovering it on this node when etcd says it may. A non-nil reply is the
// answer to give instead (a redirect or an error).
//
// The activation runs under the node, not under the caller that asked
// first: a caller that gives up does not abandon a claim half-made (its
// record may be written already), and the callers after it find the object
// activating, or active, instead of starting over. Only the first caller
// hears a state_lost from its activation.
func (n *Node) hostedOrActivate(ctx context.Context, obj keyspace.Object, typ actor.Type) (*hosted.Object, *pb.CallReply) {
	name := obj.String()
	n.mu.Lock()
	if n.closing {
		n.mu.Unlock()
		return nil, &pb.CallReply{Code: pb.Code_CODE_SHUTTING_DOWN, Message: "node " + n.cfg.Name + " is shutting down"}
	}
	h, ok := n.objects[name]
	var first chan *pb.CallReply
	if !ok {
		h = hosted.New(n.env, obj, n.typeRef(typ))
		n.objects[h.Name()] = h // the one copy of the name
		n.noteChangeLocked()
		first = make(chan *pb.CallReply, 1)
		actx, cancel := n.activationContext(ctx)
		n.activating.Go(func() { // added under n.mu before closing: Stop waits for it
			defer cancel()
			first <- n.runActivation(actx, h)
		})
	}
	n.mu.Unlock()
	select {
	case <-h.ReadyCh():
	case <-ctx.Done():
		return nil, &pb.CallReply{Code: pb.Code_CODE_DEADLINE_EXCEEDED, Message: "waiting for activation of " + name}
	}
	if h.FailReply != nil {
		return nil, h.FailReply
	}
	if first != nil {
		return h, <-first // sent as its activation ended
	}
	return h, nil
}

// activationContext is the context of an activation first asked for under
// ctx: ctx's values (its trace), bounded by the call timeout and by the
// node's Stop instead of by the caller.
func (n *Node) activationContext(ctx context.Context) (context.Context, context.CancelFunc) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.cfg.CallTimeout)
	stop := context.AfterFunc(n.stopCtx, cancel)
	return actx, func() { stop(); cancel() }
}

// runActivation activates h (activate) and ends its activation: hosted,
// or forgotten with its failure for whoever waits. Its reply is the first
// caller's (nil, or state_lost for an object served from now on).
func (n *Node) runActivation(ctx context.Context, h *hosted.Object) *pb.CallReply {
	rep := n.activate(ctx, h)
	if rep != nil && rep.Code != pb.Code_CODE_STATE_LOST {
		h.FailReply = rep
		n.forget(h)
		h.MarkReady()
		return rep
	}
	n.metrics.Hosted.Inc()
	h.MarkReady()
	h.KickDelivery() // a durable object re-activated with messages to send
	return rep
}

func (n *Node) canHost(typ string) bool {
	return n.cfg.Weight > 0 && n.hosts[typ]
}

// activate decides, from etcd, whether this node may serve h's object:
// activate (no record), wake (asleep), host (our record), recover (owner
// gone) or redirect.
func (n *Node) activate(ctx context.Context, h *hosted.Object) *pb.CallReply {
	for i := range 8 {
		snap, err := n.readFirst(ctx, h, i == 0)
		if errors.Is(err, authority.ErrNotFound) {
			if rep := n.mayActivate(h, ""); rep != nil {
				return rep
			}
			res, err := n.store.Activate(ctx, authority.ActivateRequest{Object: h.Object(), Owner: n.self, Node: n.selfNode,
				ReadState: h.Typ.Durable && n.env.StateWithRecord()})
			if err != nil {
				return n.storeReply("activate "+h.Name(), err)
			}
			n.cache.Observe(res.Snapshot)
			if res.Won {
				n.metrics.Activations.Inc()
				h.Install(res.Snapshot)
				if h.Typ.Durable {
					return h.FreshDurable(ctx, res.State)
				}
				return nil
			}
			snap = res.Snapshot
		} else if err != nil {
			return n.storeReply("read "+h.Name(), err)
		}
		n.cache.Observe(snap)
		if snap.Record.Asleep() {
			if rep, again := n.wake(ctx, h, snap); !again {
				return rep
			}
			continue
		}
		if snap.Record.Owner == n.self {
			h.Install(snap)
			if h.Typ.Durable {
				return h.LoadDurable(ctx, nil) // its state is in etcd: nothing was lost
			}
			// Not from this node's hands as far as it knows: it holds what
			// it writes itself, unless it could not confirm a claim.
			return stateLost(h.Recreated(snap, "", "the recovery controller (or a claim of this node's it could not confirm)"))
		}
		if n.dir.Alive(snap.Record.Owner.ID, snap.Record.Owner.Generation) {
			return n.notOwner(snap)
		}
		if rep := n.mayActivate(h, "is orphaned and "); rep != nil {
			return rep
		}
		w, err := n.store.Recover(ctx, authority.RecoverRequest{Seen: snap, NewOwner: n.self, Node: n.selfNode})
		if err != nil {
			return n.storeReply("recover "+h.Name(), err)
		}
		if w.NoSpace {
			return n.noSpaceReply("recover " + h.Name() + ": " + authority.ErrNoSpace.Error())
		}
		if w.Found {
			n.cache.Observe(w.Snapshot)
		}
		if w.Written {
			n.metrics.Recoveries.Inc()
			h.Install(w.Snapshot)
			if h.Typ.Durable {
				// Its state survived its owner in etcd: restored, no StateLost.
				return h.LoadDurable(ctx, nil)
			}
			return stateLost(h.Recreated(w.Snapshot, snap.Record.Owner.String(), "its recovery here"))
		}
		if w.Found && w.OwnerAlive {
			return n.notOwner(w.Snapshot)
		}
		// The record moved under us: read again.
	}
	return &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE, Message: "activation of " + h.Name() + " kept racing"}
}

// readFirst is h's record as activate starts from: read from etcd
// through its quorum, except at the first look (first)
//
//   - of a reminder's firing that read the object asleep: that record
//     (reminders.Seen), which the wake compares;
//   - at a name the location cache does not hold (a new object's, or a
//     sleeping one's: the cache keeps nothing of those), when this node
//     may take the object. Never seen asleep (Cache.MaybeAsleep): taken
//     as absent, the first call costs the claim's transaction alone,
//     which compares that the record is absent and answers with it when
//     it is not. Maybe asleep: read from the local etcd member, with no
//     quorum round, where a claim that lost would cost a raft write
//     before the wake; a stale read only fails the compare that follows.
//
// A node that would refuse reads through the quorum, to redirect instead.
func (n *Node) readFirst(ctx context.Context, h *hosted.Object, first bool) (authority.Snapshot, error) {
	if first {
		if snap, ok := reminders.Seen(ctx, h.Name()); ok {
			return snap, nil
		}
		if _, seen := n.cache.EntryOf(h.Name()); !seen && n.mayActivate(h, "") == nil {
			if n.cache.MaybeAsleep(h.Name()) {
				return n.store.ReadLocal(ctx, h.Object())
			}
			return authority.Snapshot{}, authority.ErrNotFound
		}
	}
	return n.store.Read(ctx, h.Object())
}

// mayActivate is nil when this node may take h's object (create, wake or
// recover it), and the refusal otherwise; why says what the object is.
func (n *Node) mayActivate(h *hosted.Object, why string) *pb.CallReply {
	if rep := n.refuseActivation(h.Name()); rep != nil { // drain.go
		return rep
	}
	if !n.canHost(h.Typ.Name) {
		return &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE, Message: fmt.Sprintf("%s %snode %s does not host type %s", h.Name(), why, n.cfg.Name, h.Typ.Name)}
	}
	n.mu.Lock()
	count := len(n.objects)
	n.mu.Unlock()
	return n.env.RefuseNew(h.Name(), count) // at the memory limits: another node takes it
}

// wake activates h's sleeping object (snap) here: a durable one from its
// persisted state, a memory one from New (docs/developing/lifecycle.md). again: the
// record changed first (another node woke it): read it again.
func (n *Node) wake(ctx context.Context, h *hosted.Object, snap authority.Snapshot) (rep *pb.CallReply, again bool) {
	if rep := n.mayActivate(h, "is asleep and "); rep != nil {
		return rep, false
	}
	w, err := n.store.Wake(ctx, authority.WakeRequest{Seen: snap, Owner: n.self, Node: n.selfNode,
		ReadState: h.Typ.Durable && n.env.StateWithRecord()})
	if err != nil {
		return n.storeReply("wake "+h.Name(), err), false
	}
	if w.Found {
		n.cache.Observe(w.Snapshot)
	}
	if !w.Written {
		return nil, true
	}
	n.metrics.Lifecycle.Wakes.Inc()
	h.Install(w.Snapshot)
	if h.Typ.Durable {
		return h.LoadDurable(ctx, w.State), false
	}
	return nil, false
}

// notOwner is the redirect to the owner named in snap.
func (n *Node) notOwner(snap authority.Snapshot) *pb.CallReply {
	return &pb.CallReply{
		Code:    pb.Code_CODE_NOT_OWNER,
		Message: fmt.Sprintf("%s is owned by %s", snap.Object, snap.Record.Owner),
		Hint:    &pb.Location{Fence: n.wireFence(snap.Fence(), snap.StoreVersion, snap.Record.Node.RoutingID), Address: snap.Record.Node.Address},
	}
}

// notOwnerAt redirects a request for obj to loc.
func (n *Node) notOwnerAt(obj keyspace.Object, loc record.Location) *pb.CallReply {
	return &pb.CallReply{
		Code:    pb.Code_CODE_NOT_OWNER,
		Message: fmt.Sprintf("%s is owned by %s", obj, loc.Owner),
		Hint:    &pb.Location{Fence: n.wireFence(loc.Fence(), loc.StoreVersion, loc.Node.RoutingID), Address: loc.Node.Address},
	}
}

// forget removes h from the hosted objects if it is still the one
// registered (and wakes whoever waits for a removal: placeRestored); it
// reports whether it was.
func (n *Node) forget(h *hosted.Object) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.objects[h.Name()] != h {
		return false
	}
	delete(n.objects, h.Name())
	n.objects = shrink.Deleted(n.objects, &n.peak)
	n.noteChangeLocked()
	return true
}

// hostedChanged is closed at the next change of the hosted objects: one
// added or removed, admitted, released by its relocation, a relocation
// ended (placeRestored and drain wait on it).
func (n *Node) hostedChanged() <-chan struct{} { return n.changes.Wait() }

// noteChange signals a change (noteChangeLocked with n.mu held, so that a
// waiter that read the objects under n.mu misses none).
func (n *Node) noteChange() {
	n.mu.Lock()
	n.changes.Note()
	n.mu.Unlock()
}

func (n *Node) noteChangeLocked() { n.changes.Note() }

// unhost removes a serving h from the hosted objects (forget, counted).
func (n *Node) unhost(h *hosted.Object) {
	if n.forget(h) {
		n.metrics.Hosted.Dec()
	}
}

// notHere answers a request for an object this node no longer hosts.
func (n *Node) notHere(obj keyspace.Object) *pb.CallReply {
	if loc, ok := n.cache.Lookup(obj); ok && loc.Owner != n.self && !loc.Asleep() {
		return &pb.CallReply{Code: pb.Code_CODE_NOT_OWNER, Message: obj.String() + " is not hosted here",
			Hint: &pb.Location{Fence: n.wireFence(loc.Fence(), loc.StoreVersion, loc.Node.RoutingID), Address: loc.Node.Address}}
	}
	return &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE, Message: obj.String() + " is not hosted here"}
}
