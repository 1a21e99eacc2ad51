package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshloc/meshloc/internal/bench"
	"github.com/meshloc/meshloc/internal/bench/report"
	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/node"
)

// errTargetsMissed: --strict and a figure missed its target (exit status 1).
var errTargetsMissed = errors.New("bench: targets missed (--strict)")

func benchCmd(g *globals, out io.Writer) *cobra.Command {
	var (
		quick, strict, secured   bool
		dir, profile             string
		blockProfile             string
		mutexProfile, memProfile string
		traceFile                string
		only                     []string
		eager                    int
		chunk                    int
		batch                    bool
		markdown                 bool
		from                     string
		bgTarget                 time.Duration
		bgMin                    float64
		scale                    bench.ScalePlan
		life                     bench.LifecyclePlan
		peersDir                 string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "measure meshloc against its baselines, side by side in one run, and print the ratios",
		Long: `Start an embedded etcd, two meshnodes and a gateway in this process (real
gRPC over loopback), measure the baselines — etcd CAS latency and rate, an
8-key transaction, loopback TCP, CRC32C, raw gRPC unary, and "stop, persist
to etcd, re-activate elsewhere" with the plain etcd client for each state
size — and meshloc's figures: interruption of 1 KiB, 1 MiB and 64 MiB states
idle and under a call load, relocations/s with 1, 8 and 64 in flight,
objects/s in groups of 8, streaming a 256 MiB state, calls direct and
through a gateway idle and beside a relocation storm (as background
relocations, the targets, then in the foreground). Every figure is
printed with its baseline, the ratio and its target, marked met or not.

The full plan takes about 3 minutes on two cores; --quick, under 30 s. --tls runs
the plan twice, plaintext then secured (mutual TLS between nodes and clients,
etcd over TLS with certificate authentication), and prints the secured
run's report and every measure of both side by side.

The scale section runs only when --only names it (many minutes: each part
builds a cluster of its own): a node of --scale-objects drained, its
orphans recovered after a kill -9, first-call activations, etcd's size
after a --scale-storm relocation storm under a quota, a relocation's etcd
CPU with 4 and 32 location caches, a node joining 1,000,000 records, the
memory of idle objects. --scale-parts runs some of them.
The peers section also runs only when --only names it: meshloc beside
Proto.Actor Go in the same run, on clusters of one shape (three member
processes, a counter); it builds the peer from bench/peers of the source
tree with the go command (--peers-dir).
The lifecycle section too: --lifecycle-objects durable objects (100,000)
made, put to sleep by a node with --lifecycle-sleep-after (5s), the node's
memory with all of them asleep, and the latency of a call that wakes one;
then as many reminders, due over a minute at 100,000, on two nodes, one
killed -9 halfway: each fired once, and how late (--lifecycle-reminders-only:
that part alone). --lifecycle-state-store postgres runs it all with the
nodes' durable state in a PostgreSQL server the section launches.
The durable section too (under 2 minutes): a durable write (an awake
dcounter's add) on a node with the etcd store beside an etcd CAS, and on a
node with the PostgreSQL store beside a bare one-row conditional UPDATE;
the wake of a dblob with a 1 MiB state, asleep in PostgreSQL, beside a
SELECT of a 1 MiB row. It launches its own PostgreSQL server from the
machine's binaries (apt-get install postgresql; or MESHLOC_PG_BIN).
-o json prints the report as JSON; --markdown, as Markdown tables (as
docs/performance.md shows them). --from FILE prints a report saved with -o json again, measuring
nothing. Exit status 0 unless a measurement could
not be made, or --strict and a target was missed (1).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := bench.Config{Plan: bench.FullPlan(), Dir: dir, Progress: os.Stderr, Only: only, PeersDir: peersDir}
			for _, p := range scale.Parts {
				if !slices.Contains(bench.ScaleParts(), p) {
					return usageError{err: fmt.Errorf("--scale-parts %q: the parts are %s", p, strings.Join(bench.ScaleParts(), ","))}
				}
			}
			if scale.Objects < 0 || scale.Storm < 0 {
				return usageError{err: errors.New("--scale-objects and --scale-storm: 0 (the default) or more")}
			}
			if eager < -1 {
				return usageError{err: fmt.Errorf("--eager-cutover-bytes %d: 0 or more", eager)}
			}
			cfg.Tune = func(c *node.Config) {
				if eager >= 0 {
					c.EagerCutoverBytes = eager
				}
				if chunk > 0 {
					c.ChunkBytes = chunk
				}
				c.BatchWrites = batch
				if bgTarget >= 0 {
					c.BackgroundLatencyTarget = bgTarget
				}
				if bgMin > 0 {
					c.BackgroundMinRate = bgMin
				}
			}
			if quick {
				cfg.Plan = bench.QuickPlan()
			}
			cfg.Plan.Scale = scale
			if life.Objects < 0 || life.SleepAfter < 0 || life.Settle < 0 {
				return usageError{err: errors.New("--lifecycle-objects, --lifecycle-sleep-after, --lifecycle-settle: 0 (the default) or more")}
			}
			cfg.Plan.Lifecycle = life
			for _, o := range only {
				if !slices.Contains(bench.Sections, o) {
					return usageError{err: fmt.Errorf("--only %q: the sections are %s", o, strings.Join(bench.Sections, ","))}
				}
			}
			if profile != "" {
				f, err := os.Create(profile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			if blockProfile != "" || mutexProfile != "" || memProfile != "" {
				stop, err := startEndProfiles(blockProfile, mutexProfile, memProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			if traceFile != "" {
				stop, err := startTrace(traceFile)
				if err != nil {
					return err
				}
				defer stop()
			}
			if markdown && g.output == "json" {
				return usageError{err: errors.New("--markdown and -o json: choose one")}
			}
			if from != "" {
				if secured || quick || len(only) > 0 {
					return usageError{err: errors.New("--from prints a saved report: it takes no --tls, --quick or --only")}
				}
				r, err := readReport(from)
				if err != nil {
					// A file that is not a report is bad input, like a bad flag.
					return usageError{err: fmt.Errorf("--from %s: %w", from, err), code: api.CodeInvalidArgument}
				}
				return writeReport(out, r, g.output, markdown)
			}
			r, err := bench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if secured {
				// The same plan again, secured; then the two side by side.
				cfg.TLS = true
				sr, err := bench.Run(cmd.Context(), cfg)
				if err != nil {
					return err
				}
				return writeTLSComparison(out, g.output, r, sr)
			}
			if err := writeReport(out, r, g.output, markdown); err != nil {
				return err
			}
			if missed := r.Missed(); strict && len(missed) > 0 {
				for _, f := range missed {
					fmt.Fprintf(os.Stderr, "meshctl: missed: %s = %s×%s, target %s\n", f.Name, fmtRatio(f.Ratio), " "+f.Baseline.Name, f.Target)
				}
				return errTargetsMissed
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&quick, "quick", false, "the quick plan: fewer samples, under a minute")
	f.BoolVar(&strict, "strict", false, "exit status 1 if a figure misses its target")
	f.BoolVar(&secured, "tls", false, "run the plan twice, plaintext then secured (mutual TLS, etcd over TLS with authentication), and print every measure of both side by side")
	f.StringSliceVar(&only, "only", nil, "run only these sections: "+strings.Join(bench.Sections, ","))
	f.StringVar(&profile, "cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	f.StringVar(&blockProfile, "blockprofile", "", "write a profile of where goroutines blocked (channels, selects, locks) to this file (go tool pprof)")
	f.StringVar(&mutexProfile, "mutexprofile", "", "write a profile of contended locks to this file (go tool pprof)")
	f.StringVar(&memProfile, "memprofile", "", "write a profile of what the run allocated, by call site, to this file (go tool pprof -sample_index=alloc_space)")
	f.StringVar(&traceFile, "trace", "", "write an execution trace of the run to this file (go tool trace): scheduling latency, GC, blocking")
	f.IntVar(&chunk, "chunk-bytes", 0, "the nodes' --chunk-bytes (0: theirs, 1 MiB), for an A/B of the chunk size")
	f.IntVar(&eager, "eager-cutover-bytes", -1, "the nodes' --eager-cutover-bytes (-1: theirs, 64 KiB; 0: off), for an A/B of the eager cutover")
	f.BoolVar(&batch, "batch-writes", true, "the nodes' --batch-writes, for an A/B of batched relocation writes")
	f.DurationVar(&bgTarget, "background-latency-target", -1, "the nodes' --background-latency-target (-1: theirs; 0: background relocations never paced), for an A/B of the pacing")
	f.Float64Var(&bgMin, "background-min-rate", 0, "the nodes' --background-min-rate (0: theirs)")
	f.IntVar(&scale.Objects, "scale-objects", 0, "objects on the node the scale section drains, recovers, activates (0: 100,000)")
	f.DurationVar(&scale.Storm, "scale-storm", 0, "how long the scale section's etcd part storms (0: 10m)")
	f.StringSliceVar(&scale.Parts, "scale-parts", nil, "run only these parts of the scale section: "+strings.Join(bench.ScaleParts(), ","))
	f.IntVar(&life.Objects, "lifecycle-objects", 0, "durable objects the lifecycle section puts to sleep (0: 100,000)")
	f.DurationVar(&life.SleepAfter, "lifecycle-sleep-after", 0, "the lifecycle section's node --sleep-after (0: 5s)")
	f.BoolVar(&life.RemindersOnly, "lifecycle-reminders-only", false, "the lifecycle section runs its reminders part alone")
	f.StringVar(&life.StateStore, "lifecycle-state-store", "", "where the lifecycle section's nodes keep durable state: etcd (the default) or postgres (a server it launches from the machine's PostgreSQL binaries)")
	f.DurationVar(&life.Settle, "lifecycle-settle", 0, "how long the lifecycle section's node stays idle before its memory is read (0: 130s)")
	f.StringVar(&peersDir, "peers-dir", "", "the peers section's Proto.Actor program, a Go module it builds (default: bench/peers of the source tree above the working directory)")
	f.BoolVar(&markdown, "markdown", false, "print the report as Markdown tables, as docs/performance.md shows them")
	f.StringVar(&from, "from", "", "print this report (saved with -o json bench) again instead of measuring")
	f.StringVar(&dir, "dir", "", "directory for the embedded etcd's data (default: a temporary directory, removed at the end)")
	return cmd
}

// writeReport prints one run's report in the chosen format.
func writeReport(out io.Writer, r *bench.Report, format string, markdown bool) error {
	switch {
	case format == "json":
		return r.WriteJSON(out)
	case markdown:
		return r.WriteMarkdown(out)
	}
	return r.WriteText(out)
}

func readReport(path string) (*bench.Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return report.ReadJSON(f)
}

func fmtRatio(r float64) string { return fmt.Sprintf("%.2f", r) }

// writeTLSComparison prints the secured run's report and every measure of
// the two runs side by side (-o json: both reports and the comparison).
func writeTLSComparison(out io.Writer, format string, plain, secured *bench.Report) error {
	cs := report.Compare(plain, secured)
	if format == "json" {
		e := json.NewEncoder(out)
		e.SetIndent("", "  ")
		return e.Encode(struct {
			Plaintext  *bench.Report      `json:"plaintext"`
			TLS        *bench.Report      `json:"tls"`
			Comparison []bench.Comparison `json:"comparison"`
		}{plain, secured, cs})
	}
	if err := secured.WriteText(out); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nplaintext and mutual TLS, the same plan, one after the other:")
	return report.WriteComparison(out, cs)
}
