package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/meshloc/meshloc/internal/verify"
)

// Workloads are the workload names Spec accepts (meshctl verify runs them
// all by default).
var Workloads = []string{"bank", "register", "list", "counter", "sessions", "transfers", "lifecycle", "dbank", "dlist"}

// lifecycleSleepAfter is the nodes' --sleep-after in a run with the
// lifecycle workload: its durable objects (and every other durable
// object of the run) sleep when idle that long.
const lifecycleSleepAfter = 200 * time.Millisecond

// DefaultWorkloads are what a Spec without Workloads runs: the planted-bug
// self-test's runs are tuned to them.
var DefaultWorkloads = []string{"bank", "register", "list", "counter"}

// Spec is one checked run over a process cluster.
type Spec struct {
	Cluster Config
	// Workloads by name (default DefaultWorkloads).
	Workloads []string
	// Streams per workload (default 3).
	Streams int
	// Duration of the load (default 20 s).
	Duration time.Duration
	// Faults are the fault kinds, cycled: the first at FirstFault (default
	// 5 s), then one every FaultEvery (default 20 s) while the load runs.
	Faults     []string
	FirstFault time.Duration
	FaultEvery time.Duration
	// Seed of the victims' choice (0: random).
	Seed uint64
	// Think between two operations of a stream (default 3 ms).
	Think time.Duration
	// NoRelocations turns the relocation storm off.
	NoRelocations bool
	// RelocationInterval between two relocations of one storm worker
	// (default 20 ms); RelocationWorkers (default 3).
	RelocationInterval time.Duration
	RelocationWorkers  int
	// ArtifactDir receives history.json, report.json and porcupine's pages.
	ArtifactDir string
	// Groups puts the counter and list objects into that many groups each
	// (0: none): the storm then relocates whole groups.
	Groups int
	// Rotate moves the list and bank workloads on to fresh objects after
	// that many acknowledged writes each (0: never), so that long runs keep
	// their reads small.
	Rotate int
	// Inspect, if set, is called with the cluster and the report after the
	// checks, before the cluster stops (extra checks of a test).
	Inspect func(c *Cluster, rep *verify.Report)
}

func (s *Spec) defaults() {
	if len(s.Workloads) == 0 {
		s.Workloads = DefaultWorkloads
	}
	if s.Streams <= 0 {
		s.Streams = 3
	}
	if s.Duration <= 0 {
		s.Duration = 20 * time.Second
	}
	if s.FirstFault <= 0 {
		s.FirstFault = 5 * time.Second
	}
	if s.FaultEvery <= 0 {
		s.FaultEvery = 20 * time.Second
	}
	if s.Seed == 0 {
		s.Seed = rand.Uint64()
	}
	if s.Think <= 0 {
		s.Think = 3 * time.Millisecond
	}
	if s.RelocationInterval <= 0 {
		s.RelocationInterval = 20 * time.Millisecond
	}
	if s.RelocationWorkers <= 0 {
		s.RelocationWorkers = 3
	}
}

// NewWorkloads builds the named workloads with unique object names; rotate:
// see Spec.Rotate.
func NewWorkloads(names []string, prefix string, think time.Duration, artifacts string, rotate, groups int) ([]verify.Workload, error) {
	var out []verify.Workload
	for _, n := range names {
		switch strings.TrimSpace(n) {
		case "bank":
			out = append(out, &verify.Bank{Prefix: prefix, N: 2, Think: think, Rotate: rotate})
		case "dbank": // the durable variants: their state is in the state store
			out = append(out, &verify.Bank{Type: "dbank", Prefix: prefix, N: 2, Think: think, Rotate: rotate})
		case "dlist":
			out = append(out, &verify.List{Type: "dlist", Prefix: prefix, N: 6, Think: think, Rotate: rotate, Groups: groups})
		case "register":
			out = append(out, &verify.Register{Prefix: prefix, N: 12, Think: think, ArtifactDir: artifacts})
		case "list":
			out = append(out, &verify.List{Prefix: prefix, N: 6, Think: think, Rotate: rotate, Groups: groups})
		case "counter":
			out = append(out, &verify.Counter{Prefix: prefix, N: 6, Think: think, Groups: groups})
		case "sessions":
			out = append(out, &verify.Sessions{Prefix: prefix, Rooms: 5, PerStream: 7, Think: think})
		case "transfers":
			out = append(out, &verify.Transfers{Prefix: prefix, N: 12, Chains: 200, Think: think})
		case "lifecycle":
			// Durable counters left idle past the nodes' --sleep-after
			// (lifecycleSleepAfter): they sleep and wake all run long.
			out = append(out, &verify.Counter{Label: "lifecycle", Type: "dcounter", Durable: true, Deletes: true, Reminders: true, Prefix: prefix, N: 6, Think: think, Idle: 3 * lifecycleSleepAfter})
		default:
			return nil, fmt.Errorf("chaos: unknown workload %q (want %s)", n, strings.Join(Workloads, ", "))
		}
	}
	return out, nil
}

// Run starts a cluster, runs the spec against it, stops the cluster and
// returns the report. The error is for a run that could not start.
func Run(ctx context.Context, s Spec) (*verify.Report, error) {
	s.defaults()
	prefix := fmt.Sprintf("v%d", s.Seed%1_000_000)
	workloads, err := NewWorkloads(s.Workloads, prefix, s.Think, s.ArtifactDir, s.Rotate, s.Groups)
	if err != nil {
		return nil, err
	}
	for _, w := range workloads {
		if t, ok := w.(*verify.Transfers); ok {
			// The chains spread over the first 80% of the load, so that
			// the faults find messages in flight.
			t.Pace = s.Duration * 8 / 10 * time.Duration(s.Streams) / time.Duration(max(t.Chains, 1))
		}
	}
	if slices.Contains(s.Workloads, "lifecycle") {
		s.Cluster.NodeArgs = append(slices.Clone(s.Cluster.NodeArgs), "--sleep-after", lifecycleSleepAfter.String())
	}
	c, err := Start(ctx, s.Cluster)
	if err != nil {
		return nil, err
	}
	var objects []string
	for _, w := range workloads {
		objects = append(objects, w.Objects()...)
	}
	fm := c.Faults(objects, s.Seed)
	faults, err := fm.Schedule(s.Faults, s.Duration, s.FirstFault, s.FaultEvery)
	if err != nil {
		c.Close()
		return nil, err
	}
	rep, err := verify.Run(ctx, verify.Config{
		Cluster:            c,
		Workloads:          workloads,
		Streams:            s.Streams,
		Duration:           s.Duration,
		OpTimeout:          c.cfg.CallTimeout,
		OpTimeouts:         c.cfg.CallTimeouts,
		Relocations:        !s.NoRelocations,
		RelocationWorkers:  s.RelocationWorkers,
		RelocationInterval: s.RelocationInterval,
		// A relocation's deadline is RelocationTimeout and its hard stop as
		// long again: unanswered after three, it did not end.
		RelocationTimeout:  3 * c.cfg.RelocationTimeout,
		RelocationsMustEnd: true,
		Faults:             faults,
		ExecLogs:           c,
		FinalTimeout:       time.Minute,
		ArtifactDir:        s.ArtifactDir,
		Logf:               c.cfg.Logf,
	})
	if rep != nil {
		exits := map[string]int{}
		total := 0
		for _, e := range c.Events() {
			if e.What == "exited" {
				exits[e.Node]++
				total++
			}
		}
		rep.Figures = append(rep.Figures, verify.Figure{Name: "nodes fenced",
			Value: fmt.Sprintf("%d exits of a node that could not confirm its lease (restarted) %v", total, exits)})
	}
	if rep != nil && s.Inspect != nil {
		s.Inspect(c, rep)
	}
	if rep != nil {
		for _, f := range c.etcdFigures(ctx) {
			rep.Figures = append(rep.Figures, f)
			if strings.Contains(f.Value, "differ") {
				rep.Errors = append(rep.Errors, "etcd: "+f.Value)
			}
		}
	}
	if cerr := c.Close(); cerr != nil && rep != nil {
		rep.Errors = append(rep.Errors, "stop: "+cerr.Error())
	}
	return rep, err
}
