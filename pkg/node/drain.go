package node

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
	ErrInvalidDrain = wire.Sentinel(pb.Code_CODE_INVALID_ARGUMENT, "node: invalid drain options")
	// ErrStopping: the node is stopping, stopped or not started: it cannot drain.
	ErrStopping = wire.Sentinel(pb.Code_CODE_UNAVAILABLE, "node: stopping")
	// ErrLeaseEnded: the node lost its lease (it is fenced): it can move nothing.
	ErrLeaseEnded = wire.Sentinel(pb.Code_CODE_UNAVAILABLE, "node: lease ended")
)

// Bounds of a drain's options.
const (
	// MaxDrainConcurrency bounds DrainOptions.Concurrency and --drain-concurrency.
	MaxDrainConcurrency = 256
	// MaxDrainTimeout bounds DrainOptions.Timeout.
	MaxDrainTimeout = time.Hour
	// DefaultDrainAttempts is how often a drain tries to move one object.
	DefaultDrainAttempts = 3
	// minDrainAttempt: no relocation is started with less time than this
	// left before the drain's deadline.
	minDrainAttempt = 200 * time.Millisecond
	// noTargetWait: how long a drain waits for a node that can take a type
	// when none can (a peer restarting) before it gives up on its objects.
	noTargetWait = 2 * time.Second
)

// DrainOptions of one drain. Zero fields take the node's configuration.
type DrainOptions struct {
	// Concurrency: relocations at a time (0: Config.DrainConcurrency).
	Concurrency int
	// Timeout bounds the drain from its start (0: Config.DrainTimeout).
	Timeout time.Duration
	// Attempts per object (0: DefaultDrainAttempts).
	Attempts int
	// Progress, if set, gets every event, one at a time, on the drain's
	// goroutines: it must not block for long.
	Progress func(DrainEvent)
}

func (o DrainOptions) validate() error {
	switch {
	case o.Concurrency < 0 || o.Concurrency > MaxDrainConcurrency:
		return fmt.Errorf("%w: concurrency %d is outside [0, %d] (0: the node's --drain-concurrency)", ErrInvalidDrain, o.Concurrency, MaxDrainConcurrency)
	case o.Timeout < 0 || o.Timeout > MaxDrainTimeout:
		return fmt.Errorf("%w: timeout %s is outside [0, %s] (0: the node's --drain-timeout)", ErrInvalidDrain, o.Timeout, MaxDrainTimeout)
	case o.Attempts < 0 || o.Attempts > 100:
		return fmt.Errorf("%w: attempts %d is outside [0, 100]", ErrInvalidDrain, o.Attempts)
	}
	return nil
}

// DrainEventKind says what a DrainEvent reports.
type DrainEventKind string

// The kinds of drain events.
const (
	DrainStarted DrainEventKind = "started" // Remaining: objects hosted at the start
	DrainMoved   DrainEventKind = "moved"   // Object moved to Target
	DrainRetry   DrainEventKind = "retry"   // an attempt did not move Object (Code, Message); another follows
	DrainFailed  DrainEventKind = "failed"  // Object will not be moved (Code, Message)
)

// DrainEvent is one step of a drain.
type DrainEvent struct {
	Kind   DrainEventKind
	Object string
	// Target is the owner pair "id@generation" of the attempt.
	Target string
	// Attempt is the object's relocation attempt, from 1.
	Attempt      int
	Code         pb.Code
	Message      string
	RelocationID []byte
	Interruption time.Duration
	// Running totals, and the objects still hosted here.
	Moved, Failed, Remaining int
}

// DrainedObject is an object the drain moved away.
type DrainedObject struct {
	Object       string
	Target       string // owner pair "id@generation"
	RelocationID []byte
	Attempts     int
	Interruption time.Duration
}

// DrainFailure is an object the drain could not move, and why.
type DrainFailure struct {
	Object   string
	Code     pb.Code
	Reason   string
	Attempts int
}

// DrainReport is the result of a drain.
type DrainReport struct {
	Owner    string // the drained owner pair, "id@generation"
	Moved    []DrainedObject
	Failed   []DrainFailure
	Started  time.Time
	Duration time.Duration
	// Relocations started, retries included.
	Relocations int
	// EndedEarly says why the drain stopped before every object was handled
	// (its deadline, its ctx, Stop); "" when it finished.
	EndedEarly string
}

// Proto is the report as AdminService.Drain sends it.
func (r *DrainReport) Proto(stopping bool) *pb.DrainReport {
	out := &pb.DrainReport{Owner: r.Owner, StartedUnixMs: r.Started.UnixMilli(), DurationUs: r.Duration.Microseconds(),
		Relocations: uint32(r.Relocations), Stopping: stopping, EndedEarly: r.EndedEarly}
	for _, m := range r.Moved {
		out.Moved = append(out.Moved, &pb.DrainedObject{Object: m.Object, Target: m.Target, RelocationId: m.RelocationID,
			Attempts: uint32(m.Attempts), InterruptionUs: m.Interruption.Microseconds()})
	}
	for _, f := range r.Failed {
		out.Failed = append(out.Failed, &pb.DrainFailure{Object: f.Object, Code: f.Code, Reason: f.Reason, Attempts: uint32(f.Attempts)})
	}
	return out
}

// Proto is the event as AdminService.Drain sends it.
func (e DrainEvent) Proto() *pb.DrainProgress {
	return &pb.DrainProgress{Kind: string(e.Kind), Object: e.Object, Target: e.Target, Attempt: uint32(e.Attempt), Code: e.Code,
		Message: e.Message, RelocationId: e.RelocationID, InterruptionUs: e.Interruption.Microseconds(),
		Moved: uint32(e.Moved), Failed: uint32(e.Failed), Remaining: uint32(e.Remaining)}
}

// drainState is the node's drain: at most one runs at a time.
type drainState struct {
	mu      sync.Mutex
	run     *drainRun
	stopReq chan struct{} // closed by requestStop; made on first use
}

// drainRun is one drain; callers that ask while it runs join it.
type drainRun struct {
	done   chan struct{}
	report *DrainReport
	err    error

	mu   sync.Mutex // serialises the progress callbacks
	subs map[int]func(DrainEvent)
	next int
}

func (r *drainRun) subscribe(f func(DrainEvent)) (unsubscribe func()) {
	if f == nil {
		return func() {}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.next
	r.next++
	r.subs[id] = f
	return func() {
		r.mu.Lock()
		delete(r.subs, id)
		r.mu.Unlock()
	}
}

func (r *drainRun) emit(ev DrainEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(r.subs)) {
		r.subs[id](ev)
	}
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
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if n.keeper == nil {
		return nil, fmt.Errorf("%w: the node is not started", ErrStopping)
	}
	d := &n.drain
	d.mu.Lock()
	if run := d.run; run != nil {
		select {
		case <-run.done:
		default:
			unsubscribe := run.subscribe(opts.Progress)
			d.mu.Unlock()
			defer unsubscribe()
			select {
			case <-run.done:
				return run.report, run.err
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	run := &drainRun{done: make(chan struct{}), subs: map[int]func(DrainEvent){}}
	run.subscribe(opts.Progress)
	d.run = run
	d.mu.Unlock()
	run.report, run.err = n.drainOnce(ctx, opts, run)
	close(run.done)
	return run.report, run.err
}

func (n *Node) drainOnce(ctx context.Context, opts DrainOptions, run *drainRun) (*DrainReport, error) {
	conc := orDefault(opts.Concurrency, n.cfg.DrainConcurrency)
	timeout := orDefault(opts.Timeout, n.cfg.DrainTimeout)
	attempts := orDefault(opts.Attempts, DefaultDrainAttempts)
	n.mu.Lock()
	closing := n.closing
	n.mu.Unlock()
	if closing {
		return nil, fmt.Errorf("%w: %s", ErrStopping, n.self)
	}
	if err := n.keeper.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s cannot drain: %v", ErrLeaseEnded, n.self, err)
	}
	start := n.now()
	n.draining.Store(true) // PREPAREs and activations are refused from now on
	n.wakeWaiters()        // background relocations waiting start at once
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
	dr := &drainer{n: n, ctx: ctx, deadline: start.Add(timeout), timeout: timeout, conc: conc, attempts: attempts, run: run,
		assigned: map[string]int{}, noTarget: map[string]time.Time{}, report: &DrainReport{Owner: n.self.String(), Started: start}}
	dr.loop()
	rep := dr.report
	rep.Duration = n.now().Sub(start)
	ev := n.log.Info()
	if len(rep.Failed) > 0 {
		ev = n.log.Warn()
	}
	ev.Int("moved", len(rep.Moved)).Int("failed", len(rep.Failed)).Int("relocations", rep.Relocations).
		Float64("durationMs", float64(rep.Duration.Microseconds())/1000).Str("endedEarly", rep.EndedEarly).Msg("drained")
	return rep, nil
}

func orDefault[T ~int | ~int32 | ~int64](v, def T) T {
	if v == 0 {
		return def
	}
	return v
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

func registerDrainMetrics(reg *prometheus.Registry, l prometheus.Labels) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshloc_drain_objects_total",
		Help:        "Objects handled by drains of this node, by outcome: moved, failed (lost when the node stops), retried (an attempt that did not move it).",
		ConstLabels: l}, []string{"outcome"})
	for _, o := range []string{"moved", "failed", "retried"} {
		c.WithLabelValues(o)
	}
	reg.MustRegister(c)
	return c
}

// ---------------------------------------------------------------- AdminService

// Drain (AdminService) drains the node, streaming progress and then the
// report; with stop_after (the default) the node is then asked to stop
// (StopRequested). The drain does not end when the caller goes away: it is
// the node's, like a drain on SIGTERM.
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
	rep, err := n.Drain(context.WithoutCancel(stream.Context()), DrainOptions{
		Concurrency: int(req.GetConcurrency()),
		Timeout:     time.Duration(req.GetTimeoutMs()) * time.Millisecond,
		Progress: func(e DrainEvent) {
			send(&pb.DrainEvent{Event: &pb.DrainEvent_Progress{Progress: e.Proto()}})
		},
	})
	if err != nil {
		return wire.StatusError(err)
	}
	stop := req.StopAfter == nil || req.GetStopAfter()
	send(&pb.DrainEvent{Event: &pb.DrainEvent_Report{Report: rep.Proto(stop)}})
	if stop {
		n.requestStop()
	}
	return nil
}
