package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshloc/meshloc/pkg/node/drain"
	"github.com/meshloc/meshloc/pkg/tracing"

	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Drain (design.md §7): a node that is going away first hands every object it
// hosts to other nodes, so that a rolling restart loses nothing. In order:
//
//  1. the node refuses new PREPAREs with ShuttingDown (before staging
//     anything) and activates or recovers nothing new; calls for objects it
//     still hosts are served, and it keeps routing calls as a gateway;
//  2. its descriptor says `draining` (the keeper's CAS update), so placement
//     on every node and locationd stops choosing it;
//  3. target stages in progress finish (their CUTOVER came: the object
//     arrives and is moved on like the others) or abort (a draining target
//     never commits on its own; pkg/relocation doc.go §5);
//  4. every hosted object is relocated away, a few at a time; an attempt
//     that aborted (the source kept the object) is retried, with another
//     target when there is one, within the drain's deadline;
//  5. the report lists what moved and what could not, with the reason.
//
// Drain does not revoke the lease: Stop does, after it, so that every
// relocation that named this owner ended while its lease was alive (design.md
// §7: the lease must outlive every attempt it fenced). Objects that could
// not be moved are lost when the node stops, as with a plain Stop: their next
// call re-creates them elsewhere and says so (CODE_STATE_LOST).

// Errors of Drain.
var (
	// ErrInvalidDrain: a DrainOptions field is out of range; nothing was changed.
	ErrInvalidDrain = drain.ErrInvalid
	// ErrStopping: the node is stopping, stopped or not started: it cannot drain.
	ErrStopping = wire.Sentinel(pb.Code_CODE_UNAVAILABLE, "node: stopping")
	// ErrLeaseEnded: the node lost its lease (it is fenced): it can move nothing.
	ErrLeaseEnded = wire.Sentinel(pb.Code_CODE_UNAVAILABLE, "node: lease ended")
)

// A drain's options, events and report (pkg/node/drain runs it).
type (
	DrainOptions   = drain.Options
	DrainEvent     = drain.Event
	DrainEventKind = drain.EventKind
	DrainedObject  = drain.MovedObject
	DrainFailure   = drain.Failure
	DrainReport    = drain.Report
)

// The kinds of drain events.
const (
	DrainStarted  = drain.Started
	DrainMoved    = drain.Moved
	DrainRetry    = drain.Retry
	DrainFailed   = drain.Failed
	DrainProgress = drain.Progress
)

// Bounds of a drain's options.
const (
	MaxDrainConcurrency  = drain.MaxConcurrency
	MaxDrainTimeout      = drain.MaxTimeout
	DefaultDrainAttempts = drain.DefaultAttempts
)

// drainState is the node's drain: at most one runs at a time.
type drainState struct {
	mu      sync.Mutex
	run     *drain.Run
	stopReq chan struct{} // closed by requestStop; made on first use
}

// StopRequested is closed when a drain asked through AdminService with
// stop_after ended: the process should Stop the node (cmd/meshnode does).
func (n *Node) StopRequested() <-chan struct{} {
	n.drain.mu.Lock()
	defer n.drain.mu.Unlock()
	if n.drain.stopReq == nil {
		n.drain.stopReq = make(chan struct{})
	}
	return n.drain.stopReq
}

func (n *Node) requestStop() {
	n.drain.mu.Lock()
	defer n.drain.mu.Unlock()
	if n.drain.stopReq == nil {
		n.drain.stopReq = make(chan struct{})
	}
	select {
	case <-n.drain.stopReq:
	default:
		close(n.drain.stopReq)
	}
}

// Draining reports whether the node refuses new objects (Drain or SetDraining).
func (n *Node) Draining() bool { return n.draining.Load() }

// Drain moves every object hosted here to other nodes and returns the report
// (see the order above). The node stays draining afterwards: it takes no new
// object until it is restarted; call Stop to revoke its lease.
//
// The drain ends when nothing is hosted here any more (but the objects that
// failed), at its deadline (opts.Timeout, from now), when ctx ends, or when
// Stop begins; relocations in flight then end by their own deadline, which
// is never set past the drain's. Objects not moved are in the report's
// Failed with the reason. A Drain called while another runs joins it: it
// gets its events from then on and the same report (the first caller's
// options hold). An error means nothing was drained: invalid options
// (ErrInvalidDrain), a node stopping or not started (ErrStopping), or a
// lost lease (ErrLeaseEnded).
func (n *Node) Drain(ctx context.Context, opts DrainOptions) (*DrainReport, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if n.keeper == nil {
		return nil, fmt.Errorf("%w: the node is not started", ErrStopping)
	}
	d := &n.drain
	d.mu.Lock()
	if run := d.run; run != nil {
		select {
		case <-run.Done():
		default:
			unsubscribe := run.Subscribe(opts.Progress)
			d.mu.Unlock()
			defer unsubscribe()
			select {
			case <-run.Done():
				return run.Result()
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	run := drain.NewRun()
	run.Subscribe(opts.Progress)
	d.run = run
	d.mu.Unlock()
	run.Finish(n.drainOnce(ctx, opts, run))
	return run.Result()
}

func (n *Node) drainOnce(ctx context.Context, opts DrainOptions, run *drain.Run) (*DrainReport, error) {
	conc := drain.OrDefault(opts.Concurrency, n.cfg.DrainConcurrency)
	timeout := drain.OrDefault(opts.Timeout, n.cfg.DrainTimeout)
	attempts := drain.OrDefault(opts.Attempts, DefaultDrainAttempts)
	n.mu.Lock()
	closing := n.closing
	n.mu.Unlock()
	if closing {
		return nil, fmt.Errorf("%w: %s", ErrStopping, n.self)
	}
	if err := n.keeper.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s cannot drain: %v", ErrLeaseEnded, n.self, err)
	}
	n.draining.Store(true) // PREPAREs and activations are refused from now on
	n.pacing.Wake()        // background relocations waiting start at once
	n.updateHealth()
	n.log.Info().Int("hosted", n.Hosted()).Int("concurrency", conc).Dur("timeout", timeout).Msg("draining")
	uctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := n.keeper.Update(uctx, func(d *lease.Descriptor) { d.State = lease.StateDraining })
	cancel()
	if err != nil {
		if kerr := n.keeper.Err(); kerr != nil {
			return nil, fmt.Errorf("%w: %s cannot drain: %v", ErrLeaseEnded, n.self, kerr)
		}
		// Not fatal: PREPAREs are refused anyway; peers that still choose
		// this node as a target retry elsewhere.
		n.log.Warn().Err(err).Msg("drain: could not advertise draining; draining anyway")
	} else {
		n.awaitOwnState(ctx, lease.StateDraining, 2*time.Second)
	}
	ctx, span := tracing.Start(ctx, "meshloc.drain", trace.SpanKindInternal, attribute.String("meshloc.node", n.cfg.Name))
	defer span.End() // its bulk moves are its children (reloclog.BulkTrace)
	rep := drain.Execute(ctx, drainHost{n}, drain.Params{Owner: n.self.String(), Concurrency: conc, Timeout: timeout, Attempts: attempts,
		RelocationTimeout: n.cfg.RelocationTimeout, Clock: n.clock, Log: n.log, Outcomes: n.metrics.Drained}, run)
	ev := n.log.Info()
	if len(rep.Failed) > 0 {
		ev = n.log.Warn()
	}
	ev.Int("moved", len(rep.Moved)).Int("failed", len(rep.Failed)).Int("relocations", rep.Relocations).
		Float64("durationMs", float64(rep.Duration.Microseconds())/1000).Str("endedEarly", rep.EndedEarly).Msg("drained")
	return rep, nil
}

// awaitOwnState waits (bounded by d) until this node's own directory shows
// its descriptor in state: from then on its placement (route, place) no
// longer chooses itself either.
func (n *Node) awaitOwnState(ctx context.Context, state lease.NodeState, d time.Duration) {
	t := n.clock.NewTimer(d)
	defer t.Stop()
	for {
		changed := n.dir.Changed()
		if o, ok := n.dir.Lookup(n.self.ID); !ok || o.Generation != n.self.Generation || o.Descriptor.State == state {
			return
		}
		select {
		case <-changed:
		case <-t.C():
			return
		case <-ctx.Done():
			return
		}
	}
}

// refuseActivation is the answer of a draining node asked to activate or
// recover an object: it takes nothing new (docs/design.md §7). The code is
// retryable: a gateway or client routes the call again, to a serving node.
func (n *Node) refuseActivation(name string) *pb.CallReply {
	if !n.draining.Load() {
		return nil
	}
	return &pb.CallReply{Code: pb.Code_CODE_SHUTTING_DOWN, Message: "node " + n.cfg.Name + " is draining: it activates nothing new (" + name + "); route to a serving node"}
}

// ---------------------------------------------------------------- AdminService

// What the drain's stream sends, however many objects the node holds:
// messages stay small.
const (
	// drainProgressEvery: at most one progress message this often.
	drainProgressEvery = 250 * time.Millisecond
	// drainPageObjects: objects per page of the full list.
	drainPageObjects = 1000
)

// Drain (AdminService) drains the node and streams bounded messages: a
// started event, the running totals at most every 250 ms, each of the
// first 100 objects not moved, then the report (counts and those first
// failures); with list, the full lists of the objects moved and not moved
// follow in pages of 1,000. With stop_after (the default) the node is then
// asked to stop (StopRequested). The drain does not end when the caller
// goes away: it is the node's, like a drain on SIGTERM.
func (s *adminServer) Drain(req *pb.DrainRequest, stream rpcpb.AdminService_DrainServer) error {
	n := s.n
	if req.GetTimeoutMs() < 0 || req.GetTimeoutMs() > MaxDrainTimeout.Milliseconds() {
		return wire.StatusError(fmt.Errorf("%w: timeout_ms %d is outside [0, %d]", ErrInvalidDrain, req.GetTimeoutMs(), MaxDrainTimeout.Milliseconds()))
	}
	if req.GetConcurrency() > MaxDrainConcurrency {
		return wire.StatusError(fmt.Errorf("%w: concurrency %d is above %d", ErrInvalidDrain, req.GetConcurrency(), MaxDrainConcurrency))
	}
	var smu sync.Mutex
	broken := false
	send := func(ev *pb.DrainEvent) {
		smu.Lock()
		defer smu.Unlock()
		if broken {
			return
		}
		if err := stream.Send(ev); err != nil {
			broken = true // the caller went away: the drain goes on
		}
	}
	progress := func(e DrainEvent) {
		send(&pb.DrainEvent{Event: &pb.DrainEvent_Progress{Progress: e.Proto()}})
	}
	var last time.Time
	failures := 0
	rep, err := n.Drain(context.WithoutCancel(stream.Context()), DrainOptions{
		Concurrency: int(req.GetConcurrency()),
		Timeout:     time.Duration(req.GetTimeoutMs()) * time.Millisecond,
		// Called one at a time (drain.Run.Emit).
		Progress: func(e DrainEvent) {
			switch {
			case e.Kind == DrainStarted:
				progress(e)
				last = n.now()
			case e.Kind == DrainFailed && failures < drain.FailuresSent:
				failures++
				progress(e)
			case n.now().Sub(last) >= drainProgressEvery:
				last = n.now()
				progress(DrainEvent{Kind: DrainProgress, Moved: e.Moved, Failed: e.Failed, Remaining: e.Remaining})
			}
		},
	})
	if err != nil {
		return wire.StatusError(err)
	}
	progress(DrainEvent{Kind: DrainProgress, Moved: len(rep.Moved), Failed: len(rep.Failed), Remaining: n.Hosted()})
	stop := req.StopAfter == nil || req.GetStopAfter()
	send(&pb.DrainEvent{Event: &pb.DrainEvent_Report{Report: rep.Proto(stop)}})
	if req.GetList() {
		for _, p := range rep.Pages(drainPageObjects) {
			send(&pb.DrainEvent{Event: &pb.DrainEvent_Page{Page: p}})
		}
	}
	if stop {
		n.requestStop()
	}
	return nil
}
