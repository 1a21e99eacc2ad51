package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/keyspace"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Cluster is the system under test, as the suite sees it.
type Cluster interface {
	// NewCaller returns a new client with its own fence memory; every
	// stream gets its own. The suite does not close it.
	NewCaller(ctx context.Context) (Caller, error)
	// Relocate asks the object's owner to relocate it (see RelocateFunc).
	Relocate(ctx context.Context, object, target string) (*pb.RelocationStatus, error)
	// Nodes are the node ids a relocation may name as its target.
	Nodes() []string
	// Etcd is a client of the cluster's etcd, for the audit (nil: no audit).
	Etcd() *clientv3.Client
	// Keys is the cluster's etcd key layout.
	Keys() keyspace.Keys
}

// BulkCluster is a cluster whose nodes move objects in bulk moves too: the
// storm then makes some of its attempts bulk moves (RelocateManyFunc).
type BulkCluster interface {
	RelocateMany(ctx context.Context, objects []string, target string) ([]*pb.BulkOutcome, error)
}

// Healer is a cluster that heals explicitly once the faults ended (e.g.
// restarts what is down); Run calls it before the final reads.
type Healer interface {
	Heal(ctx context.Context) error
}

// Fault is one fault injected during a run.
type Fault struct {
	// Kind counts the fault in the report ("kill-owner", "pause-node", ...).
	Kind string
	// At is when it starts, after the workloads started.
	At time.Duration
	// Inject injects the fault and heals it before it returns (e.g. SIGKILL
	// a node, wait until its lease expired, restart it). An error means
	// the fault was not injected as intended: the run then fails.
	Inject func(ctx context.Context) error
}

// Config of a run.
type Config struct {
	Cluster   Cluster
	Workloads []Workload
	// Streams per workload (default 3).
	Streams int
	// Duration of the load (default 20 s).
	Duration time.Duration
	// OpTimeout bounds one operation; past it the outcome is unknown
	// (default 5 s).
	OpTimeout time.Duration
	// OpTimeouts, when set, are the streams' bounds in turn instead (stream
	// i gets OpTimeouts[i % len]): callers that wait longer than others
	// still have a request in flight when a paused owner wakes.
	OpTimeouts []time.Duration
	// Relocations runs the relocation storm on every workload object.
	Relocations bool
	// RelocationWorkers, RelocationInterval, RelocationTimeout: see Relocator.
	RelocationWorkers  int
	RelocationInterval time.Duration
	RelocationTimeout  time.Duration
	// RelocationsMustEnd: a relocation request not answered within
	// RelocationTimeout (set it well above the relocation's own deadline)
	// is a violation. Leave it off for faults that may freeze a node.
	RelocationsMustEnd bool
	Faults             []Fault
	// ExecLogs, when set, gives the nodes' execution logs after the run.
	ExecLogs ExecLogSource
	// AuditFromRevision: see StartAudit (0: the current revision).
	AuditFromRevision int64
	// FinalTimeout bounds the final reads after heal (default 30 s).
	FinalTimeout time.Duration
	// ArtifactDir, when set, receives history.json (every operation,
	// relocation, fault and mark) and report.json.
	ArtifactDir string
	// Logf, if set, gets progress lines.
	Logf func(format string, args ...any)
}

func (c *Config) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

// Run runs the workloads against the cluster for the duration, with the
// relocation storm and the faults; then heals, reads every object (liveness),
// checks everything and returns the report. The error is for a run that
// could not start; a run that found problems says so in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Cluster == nil || len(cfg.Workloads) == 0 {
		return nil, errors.New("verify: a cluster and workloads are required")
	}
	if cfg.Streams <= 0 {
		cfg.Streams = 3
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 20 * time.Second
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = 5 * time.Second
	}
	if cfg.FinalTimeout <= 0 {
		cfg.FinalTimeout = 30 * time.Second
	}
	h := NewHistory()
	rep := &Report{Started: h.Start(), Faults: map[string]int{}}

	var audit *Audit
	if c := cfg.Cluster.Etcd(); c != nil {
		var err error
		if audit, err = StartAudit(ctx, c, cfg.Cluster.Keys(), cfg.AuditFromRevision); err != nil {
			return nil, err
		}
	}
	// Streams: one caller each.
	type stream struct {
		w Workload
		s Stream
	}
	var streams []stream
	first := map[string]Stream{}
	id := 0
	for _, w := range cfg.Workloads {
		for range cfg.Streams {
			c, err := cfg.Cluster.NewCaller(ctx)
			if err != nil {
				if audit != nil {
					audit.Stop(ctx)
				}
				return nil, fmt.Errorf("verify: client for %s: %w", w.Name(), err)
			}
			id++
			s := Stream{ID: id, Caller: c, Timeout: cfg.OpTimeout}
			if len(cfg.OpTimeouts) > 0 {
				s.Timeout = cfg.OpTimeouts[(id-1)%len(cfg.OpTimeouts)]
			}
			if _, ok := first[w.Name()]; !ok {
				first[w.Name()] = s
			}
			streams = append(streams, stream{w, s})
		}
	}

	// Groups first: the workloads' objects that live in groups (groups.go).
	groups := groupsOf(cfg.Workloads)
	if err := makeGroups(ctx, cfg.Cluster, groups); err != nil {
		if audit != nil {
			audit.Stop(ctx)
		}
		return nil, err
	}
	if len(groups) > 0 {
		cfg.logf("verify: %d groups made", len(groups))
	}

	// Load, storm and faults.
	h.Mark("workload start")
	start := h.Now()
	lctx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	var load, storm, faults sync.WaitGroup
	for _, st := range streams {
		load.Go(func() { st.w.Run(lctx, st.s, h) })
	}
	if cfg.Relocations {
		r := &Relocator{ObjectsFunc: func() []string {
			var objs []string
			for _, w := range cfg.Workloads {
				objs = append(objs, w.Objects()...)
			}
			singles, _ := stormObjects(objs, groups) // members move with their group
			return singles
		}, Groups: stormGroups(groups), Targets: cfg.Cluster.Nodes(), Relocate: cfg.Cluster.Relocate,
			Workers: cfg.RelocationWorkers, Interval: cfg.RelocationInterval, Timeout: cfg.RelocationTimeout}
		if b, ok := cfg.Cluster.(BulkCluster); ok {
			r.RelocateMany = b.RelocateMany
		}
		storm.Go(func() { r.Run(lctx, h) })
	}
	for _, f := range cfg.Faults {
		faults.Go(func() {
			pause(lctx, f.At)
			if lctx.Err() != nil {
				h.Fault(f.Kind, h.Now(), h.Now(), errors.New("the run ended before the fault was due"))
				return
			}
			h.Mark("fault " + f.Kind + " start")
			t0 := h.Now()
			cfg.logf("verify: fault %s at %.1fs", f.Kind, float64(t0)/1e9)
			err := f.Inject(ctx)
			h.Fault(f.Kind, t0, h.Now(), err)
			h.Mark("fault " + f.Kind + " end")
			cfg.logf("verify: fault %s healed at %.1fs (%v)", f.Kind, float64(h.Now())/1e9, err)
		})
	}
	load.Wait()
	end := h.Now()
	h.Mark("workload end")
	storm.Wait()
	faults.Wait()
	cfg.logf("verify: load ended at %.1fs; relocations and faults done at %.1fs", float64(end)/1e9, float64(h.Now())/1e9)

	// Heal, then every object must answer.
	if hl, ok := cfg.Cluster.(Healer); ok {
		if err := hl.Heal(ctx); err != nil {
			rep.Errors = append(rep.Errors, "heal: "+err.Error())
		}
	}
	h.Mark("healed")
	healed := h.Now()
	for _, w := range cfg.Workloads {
		if st, ok := w.(Settler); ok {
			sctx, cancel := context.WithTimeout(ctx, cfg.FinalTimeout)
			if err := st.Settle(sctx, first[w.Name()], h); err != nil {
				rep.Errors = append(rep.Errors, w.Name()+": "+err.Error())
			}
			cancel()
			h.Mark(w.Name() + " settled")
		}
	}
	final := FinalState{Reads: map[string]Op{}}
	var fmu sync.Mutex
	var finals sync.WaitGroup
	fctx, fcancel := context.WithTimeout(ctx, cfg.FinalTimeout)
	for _, w := range cfg.Workloads {
		s := first[w.Name()]
		method, args := w.FinalRead()
		for _, obj := range w.Objects() {
			finals.Go(func() {
				op, ok := finalRead(fctx, s, h, w.Name(), obj, method, args)
				fmu.Lock()
				defer fmu.Unlock()
				rep.Liveness.Objects++
				if ok {
					final.Reads[obj] = op
				} else {
					rep.Liveness.Unreadable = append(rep.Liveness.Unreadable, obj)
				}
			})
		}
	}
	finals.Wait()
	fcancel()
	rep.Liveness.Readable = len(final.Reads)
	rep.Liveness.Seconds = float64(h.Now()-healed) / 1e9
	sort.Strings(rep.Liveness.Unreadable)

	if audit != nil {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		final.Audit = audit.Stop(actx)
		cancel()
		rep.Audit = final.Audit
		if final.Audit.Err != "" {
			rep.Errors = append(rep.Errors, final.Audit.Err)
		}
	}
	if cfg.ExecLogs != nil {
		logs, err := cfg.ExecLogs.ExecLogs(ctx)
		if err != nil {
			rep.Errors = append(rep.Errors, "execution logs: "+err.Error())
		} else {
			ec := CheckExecLogs(logs, final.Audit)
			rep.Exec = &ec
			final.Exec = logs
		}
	}
	cfg.logf("verify: checking %d operations", len(h.Ops()))
	Assemble(rep, h, final, cfg.Workloads, start, end, cfg.RelocationsMustEnd)
	if cfg.ArtifactDir != "" {
		if err := writeArtifacts(cfg.ArtifactDir, h, rep); err != nil {
			rep.Errors = append(rep.Errors, "artifacts: "+err.Error())
		}
	}
	return rep, nil
}

func writeArtifacts(dir string, h *History, rep *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	hj, err := json.Marshal(h.Dump())
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "history.json"), hj, 0o644); err != nil {
		return err
	}
	rj, err := rep.JSON()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.json"), rj, 0o644)
}

// finalRead reads obj until it answers (a StateLost answer is recorded and
// read again), or ctx ends.
func finalRead(ctx context.Context, s Stream, h *History, workload, obj, method string, args []string) (Op, bool) {
	for ctx.Err() == nil {
		op := invoke(ctx, s, h, true, workload, obj, method, args...)
		if op.Outcome == OK {
			return op, true
		}
		if !op.StateLost() && op.Code != pb.Code_CODE_DELETED { // both tell the caller the new object
			pause(ctx, 200*time.Millisecond)
		}
	}
	return Op{}, false
}

// Assemble runs every checker on the history and fills the report (Run
// calls it; tests call it on synthetic histories). start and end bound the
// load phase (nanoseconds from the history's start); mustEnd: see
// Config.RelocationsMustEnd.
func Assemble(rep *Report, h *History, final FinalState, workloads []Workload, start, end int64, mustEnd bool) {
	ops := h.Ops()
	rep.Seconds = float64(h.Now()) / 1e9
	rep.FaultEvents = h.Faults()
	if rep.Faults == nil {
		rep.Faults = map[string]int{}
	}
	for _, f := range rep.FaultEvents {
		rep.Faults[f.Kind]++
		if f.Err != "" {
			rep.Errors = append(rep.Errors, fmt.Sprintf("fault %s: %s", f.Kind, f.Err))
		}
	}
	rep.Load = loadFigures(ops, start, end, rep.FaultEvents)
	t := &rep.Totals
	suppressed := 0
	for _, w := range workloads {
		r := w.Check(h, final)
		rep.Workloads = append(rep.Workloads, r)
		t.Lost += r.Lost
		t.DeclaredLost += r.DeclaredLost
		t.Duplicated += r.Duplicated
		t.Unexpected += r.Unexpected
		t.StaleReads += r.StaleReads
		rep.Violations = append(rep.Violations, prefixed(r.Workload, r.Violations)...)
		suppressed += r.Suppressed
	}
	rep.Fences = CheckFences(h, final.Audit)
	t.StaleAccepted += rep.Fences.StaleAccepted
	t.TwoOwnerWindows += rep.Fences.TwoOwners
	rep.Violations = append(rep.Violations, rep.Fences.Violations...)
	rep.Relocations = CheckRelocations(h.Relocations(), final.Audit, mustEnd)
	rep.Violations = append(rep.Violations, rep.Relocations.Violations...)
	if a := final.Audit; a != nil {
		t.TwoOwnerWindows += a.TwoOwnerWindows
		rep.Violations = append(rep.Violations, prefixed("audit", a.Violations)...)
	}
	if e := rep.Exec; e != nil {
		t.TwoOwnerWindows += e.TwoOwnerWindows
		t.Duplicated += e.DoubleExecutions + e.RemindersTwice
		rep.Violations = append(rep.Violations, prefixed("exec", e.Violations)...)
	}
	t.Violations = len(rep.Violations) + suppressed
}

func prefixed(who string, vs []Violation) []Violation {
	out := make([]Violation, len(vs))
	for i, v := range vs {
		v.Check = who + "/" + v.Check
		out[i] = v
	}
	return out
}
