package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/meshloc/meshloc/pkg/node/internal/hosted"
	"github.com/meshloc/meshloc/pkg/node/reloclog"

	"github.com/meshloc/meshloc/internal/relocator"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Errors of relocation requests.
var (
	// ErrNotHosted: the object is not hosted (serving) on this node.
	ErrNotHosted = wire.Sentinel(pb.Code_CODE_NOT_OWNER, "node: object not hosted here")
	// ErrAlreadyRelocating: a relocation of the object is in flight.
	ErrAlreadyRelocating = wire.Sentinel(pb.Code_CODE_CONFLICT, "node: object already relocating")
	// ErrNoTarget: no live serving node can take the object.
	ErrNoTarget = wire.Sentinel(pb.Code_CODE_UNAVAILABLE, "node: no relocation target")
	// ErrInvalidRelocation: a relocation request is malformed (a target
	// that is no owner id, a timeout outside [0, --relocation-timeout]);
	// nothing was done.
	ErrInvalidRelocation = wire.Sentinel(pb.Code_CODE_INVALID_ARGUMENT, "node: invalid relocation request")
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

// settleAfterDeadline bounds a source relocation past its deadline: the
// preserve and the settle reads that decide its outcome.
const settleAfterDeadline = 5 * time.Second

// sourceRelocation is one source relocation, made by newSource and run by
// run: the one way a relocation of an actor, a group or an Actor Join
// starts.
type sourceRelocation struct {
	n        *Node
	id       wire.RelocationID
	rec      *reloclog.Record
	machine  *relocation.Source
	mailbox  *hosted.SourceMailbox
	target   lease.Owner
	deadline time.Time
	// onReady, when set, is called once READY passed (an Actor Join
	// answers its caller).
	onReady func()
	// units: a background relocation's cost to the pacing (its stream
	// tells its target: pacing_peers.go); 0 for a foreground one.
	units float64
	// parent: the traced span that started it (reloclog.Parent).
	parent trace.SpanContext
}

// newSource makes one source relocation of primary to target: its id and
// nonce, the machine (cfg gives what differs between an actor, a group
// and an Actor Join: Object, Members, JoinGroup), its mailbox over units
// (the hosted objects moved, in participant order), and its tracked
// status. timeout 0 is Config.RelocationTimeout.
func (n *Node) newSource(primary keyspace.Object, cfg relocation.SourceConfig, units []*hosted.Object, target lease.Owner, timeout time.Duration, paced *reloclog.Record) *sourceRelocation {
	if timeout <= 0 {
		timeout = n.cfg.RelocationTimeout
	}
	id := wire.NewRelocationID()
	if paced != nil {
		id = paced.ID() // it waited for the node's pacing under this id
	}
	now := n.now()
	cfg.ID, cfg.Self, cfg.SelfRoutingID, cfg.Nonce = id, n.self, n.rid, wire.NewNonce()
	cfg.Target = relocation.TargetRef{Owner: authority.OwnerRef{ID: target.Descriptor.OwnerID, Generation: target.Generation},
		Node: authority.NodeRef{RoutingID: target.Descriptor.RoutingID, Address: target.Descriptor.Address}}
	cfg.AppVersion, cfg.DeadlineMs, cfg.ChunkSize = n.cfg.ApplicationVersion, now.Add(timeout).UnixMilli(), n.cfg.ChunkBytes
	cfg.EagerMaxBytes = n.cfg.EagerCutoverBytes
	mb := &hosted.SourceMailbox{Env: n.env, ID: id, Primary: primary, Target: target.Descriptor.OwnerID, TargetGen: target.Generation,
		Group: primary.Kind == keyspace.KindGroup, Units: units}
	if cfg.PrecopyMinBytes == 0 { // < 0: this relocation never pre-copies
		cfg.PrecopyMinBytes = n.cfg.PrecopyMinBytes
	}
	cfg.StateBytes = mb.StateBytes()
	m := relocation.NewSource(cfg)
	st := &pb.RelocationStatus{RelocationId: id[:], Object: primary.String(), Source: n.self.String(), Target: cfg.Target.Owner.String(),
		Role: "source", Phase: m.Phase().String(), StartedUnixMs: now.UnixMilli()}
	rec := paced
	if rec == nil {
		rec = n.relocs.Track(st)
	} else {
		rec.Set(func(s *pb.RelocationStatus) { s.Target, s.Phase = st.Target, st.Phase }) // started, its pacing step kept
	}
	return &sourceRelocation{n: n, id: id, rec: rec, machine: m, mailbox: mb, target: target, deadline: now.Add(timeout)}
}

// run carries the relocation out to its end and returns its final
// status; the node's stop ends it early. A caller that gives up does not:
// the machine's Stop means the node is going away, and once the object is
// sealed it ends a settling relocation without reopening the object (a
// node that stops takes the held copy with it), which for a live node
// would leave the object held, its sessions sealed, until it restarted.
// The relocation's own deadline bounds it.
func (r *sourceRelocation) run() *pb.RelocationStatus {
	n := r.n
	defer n.relocs.Untrack(r.rec)
	ctx, cancel := context.WithDeadline(n.life, r.deadline.Add(settleAfterDeadline))
	defer cancel()
	rep := reloclog.NewSourceReporter(r.rec, n.relocMetrics, n.log, n.now)
	ctx = rep.Trace(ctx, r.parent, n.self.String(), r.rec.Snapshot().GetTarget())
	defer rep.EndTrace()
	stopCtx, stopped := context.WithCancel(n.stopCtx)
	defer stopped()
	addr := r.target.Descriptor.Address
	wait := r.units > 0 && n.peerPacing.Paced(addr, n.now())
	cp, err := n.peers.OpenRelocation(ctx, addr, r.units, wait)
	if err == nil && wait {
		// The target paces: it admits this one before anything is written.
		if err = n.awaitTarget(cp, addr, r.deadline.Sub(n.now())/4); err != nil {
			cp.Close()
		}
	}
	if err != nil {
		code, msg := pb.Code_CODE_UNAVAILABLE, "cannot reach the target: "+err.Error()
		if errors.Is(err, ErrRelocationDeferred) {
			code, msg = pb.Code_CODE_RESOURCE_EXHAUSTED, err.Error()
		}
		n.endUnstarted(r.rec, relocation.Aborted, code, msg)
		return r.rec.Snapshot()
	}
	if r.units > 0 && !wait {
		defer n.learnTarget(cp, addr) // after the run: its headers came with its first answer
	}
	var peer relocator.Peer = cp
	objects := []keyspace.Object{r.mailbox.Primary}
	if r.mailbox.Group {
		for _, h := range r.mailbox.Units {
			objects = append(objects, h.Object())
		}
	}
	store, peer, mailbox := n.seams.source(r.mailbox, peer)
	s := &relocator.Source{
		Machine: r.machine, Self: n.self, LeaseID: n.keeper.LeaseID(), Objects: objects,
		Store: store, Peer: peer, Mailbox: mailbox,
		Watch: n.cache, Report: rep, Clock: n.clock,
		Budget: n.budgets.Chunk(r.target.Descriptor.Address), OnReady: r.onReady, Stop: stopCtx.Done(),
	}
	s.Run(ctx)
	return r.rec.Snapshot()
}

// RelocateOptions of one relocation.
type RelocateOptions struct {
	// Target owner id; empty: chosen by placement among serving nodes.
	Target string
	// Timeout is the relocation deadline from now (0: Config.RelocationTimeout).
	Timeout time.Duration
	// Detach: Relocate answers as soon as the relocation started (its id,
	// in flight); it runs on in the node, which lists it (Relocations)
	// while it runs and after.
	Detach bool
	// NoPrecopy: this relocation sends the sealed state whole, without a
	// pre-copy, whatever Config.PrecopyMinBytes says (an A/B of it).
	NoPrecopy bool
	// Foreground: start at once. Otherwise the relocation is background
	// work: while the node's calls are slow (Config.BackgroundLatencyTarget)
	// it waits for the node's pacing, at most half its Timeout (then
	// ErrRelocationDeferred, nothing done), and runs in what is left of it.
	// A draining node starts every relocation at once.
	Foreground bool
	// SkipPinned: RelocateMany refuses a pinned object (the rebalancer's
	// moves; a drain moves them all).
	SkipPinned bool

	// paced: the status of this relocation while it waited for the node's
	// pacing (its id and its "pacing" step); the relocation goes on in it.
	paced *reloclog.Record
}

// Relocate moves a hosted object to another node and returns when the
// relocation ended, with its status. The object keeps serving until the seal,
// and requests that arrive while it moves are executed by whichever side ends
// up owning it, in order. A background relocation (not opts.Foreground)
// first waits for the node's pacing while its calls are slow (pacing.go).
func (n *Node) Relocate(ctx context.Context, name string, opts RelocateOptions) (*pb.RelocationStatus, error) {
	obj, err := keyspace.ParseObject(name)
	if err != nil {
		return nil, err
	}
	if err := n.validRelocation(opts.Target, opts.Timeout); err != nil {
		return nil, err
	}
	if opts.Timeout == 0 {
		opts.Timeout = n.cfg.RelocationTimeout
	}
	units := n.backgroundUnits(obj, opts) // once: the same units wait here and go to the target
	if units > 0 && !n.pacing.StartsNow(units) {
		// Background, and the node's calls are slow: it waits for the
		// node's pacing, listed meanwhile (pacing_wait.go).
		return n.relocatePaced(ctx, obj, opts, units)
	}
	return n.relocateNow(ctx, obj, opts, units)
}

// relocateNow relocates obj once admitted: a group with every member, or
// an actor. opts.paced is the status of a relocation that waited for the
// node's pacing, which it goes on in; an error means nothing was started.
func (n *Node) relocateNow(ctx context.Context, obj keyspace.Object, opts RelocateOptions, units float64) (*pb.RelocationStatus, error) {
	if obj.Kind == keyspace.KindGroup {
		return n.relocateGroup(ctx, obj, opts, units) // the group and every member (groups.go)
	}
	h, err := n.holdHosted(ctx, obj)
	if err != nil {
		return nil, err
	}
	defer func() {
		if h != nil {
			n.releaseActor(h)
		}
	}()
	snap, err := n.recordOf(ctx, h, obj)
	if err != nil {
		return nil, err
	}
	if snap.Record.Owner != n.self {
		return nil, fmt.Errorf("%w: %s is owned by %s", ErrNotHosted, obj, snap.Record.Owner)
	}
	if snap.Record.Group != "" {
		if g, gerr := keyspace.ParseObject(snap.Record.Group); gerr == nil && n.draining.Load() {
			// A draining node moves a member's whole group: the member
			// cannot move alone, and must not be left behind (groups.go).
			n.releaseActor(h)
			h = nil
			return n.relocateGroup(ctx, g, opts, 0) // a draining node's: foreground
		}
		return nil, &GroupMemberError{Object: obj.String(), Group: snap.Record.Group}
	}
	target, err := n.pickTarget(ctx, opts.Target, obj.Type)
	if err != nil {
		return nil, err
	}
	held := h
	h = nil // released by launch
	r := n.newSource(obj, relocation.SourceConfig{Object: snap, PrecopyMinBytes: noPrecopy(opts)}, []*hosted.Object{held}, target, opts.Timeout, opts.paced)
	r.units, r.parent = units, reloclog.Parent(ctx)
	return n.launch(r, opts.Detach, func() { n.releaseActor(held) }), nil
}

// recordOf is the record a relocation of h plans from: the one h serves
// under, while the location cache has seen no later write of it, saving
// a read of etcd per relocation; otherwise etcd's. A write the cache has
// not seen yet fails the intent's compare: the relocation is aborted
// (stale_fence) before anything is sealed, the object serving on.
func (n *Node) recordOf(ctx context.Context, h *hosted.Object, obj keyspace.Object) (authority.Snapshot, error) {
	if s, ok := n.servedRecord(h); ok {
		n.metrics.Plans.WithLabelValues("cache").Inc()
		return s, nil
	}
	n.metrics.Plans.WithLabelValues("etcd").Inc()
	return n.store.Read(ctx, obj)
}

// servedRecord is the record h serves under, when the location cache has
// seen no later write of it.
func (n *Node) servedRecord(h *hosted.Object) (authority.Snapshot, bool) {
	h.Mu.Lock()
	s, v := h.Rec.Snapshot(h), h.Version
	h.Mu.Unlock()
	if s.StoreVersion == 0 || s.StoreVersion != v {
		return authority.Snapshot{}, false
	}
	e, ok := n.cache.EntryOf(h.Name())
	return s, ok && !e.Deleted && e.Version == v
}

// launch runs r to its end and answers its final status; detached, it runs
// r on a goroutine of the node's (Stop waits for it: it ends by its
// deadline, or as shutdown) and answers its status now, in flight. release
// undoes what the relocation held, once it ended.
func (n *Node) launch(r *sourceRelocation, detach bool, release func()) *pb.RelocationStatus {
	if detach {
		n.mu.Lock()
		closing := n.closing
		if !closing {
			n.detached.Add(1)
		}
		n.mu.Unlock()
		if !closing {
			st := r.rec.Snapshot()
			go func() {
				defer n.detached.Done()
				defer release()
				r.run()
			}()
			return st
		}
		// A stopping node runs it here: it ends at once, as shutdown.
	}
	defer release()
	return r.run()
}

// noPrecopy is SourceConfig.PrecopyMinBytes for opts: -1 (never) when
// opts.NoPrecopy, else 0 (the node's setting).
func noPrecopy(opts RelocateOptions) int {
	if opts.NoPrecopy {
		return -1
	}
	return 0
}
