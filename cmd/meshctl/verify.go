package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshloc/meshloc/internal/chaos"
	"github.com/meshloc/meshloc/internal/failpoint"
)

// errVerifyFailed: the run found a violation (exit status 1; the report
// says which).
var errVerifyFailed = errors.New("verification failed: see the report")

func verifyCmd(g *globals, out io.Writer) *cobra.Command {
	var (
		s          chaos.Spec
		faults     string
		workloads  string
		binDir     string
		workDir    string
		keep       bool
		planted    string
		selfTest   bool
		reportJSON string
	)
	s.Cluster.Logf = func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "run a checked chaos run on a local process cluster and print its report",
		Long: `Start a local cluster of processes — locationd (its embedded etcd; 3 members
with --etcd-members 3) and meshnodes, with TCP proxies on their links — run
the verification workloads (bank, register, list, counter, sessions) with a relocation
storm for --duration, inject the --faults one after another, heal, read
every object, check everything (lost, duplicated, porcupine, the etcd watch
audit, the nodes' execution logs, stale replies, liveness) and print the
report. Exit status 1 if the run failed a check.

The binaries come from --bin-dir, else from meshctl's own directory, else
they are built (go build -tags failpoints) when meshctl runs inside the
meshloc module. Failpoint faults and planted bugs need the failpoints build.

--self-test runs the planted-bug self-test instead: one short run per
planted bug with its trigger (and a control run without any), a bug not
caught run again up to 3 runs (its trigger is a race the storm may not win
in one short run), and prints "planted bugs detected k/k".

Fault kinds: ` + chaos.KindList() + `; "all" is every kind the cluster can run.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) (rerr error) {
			if s.Duration < 5*time.Second {
				return usageError{err: fmt.Errorf("--duration %s: at least 5s", s.Duration)}
			}
			if s.Cluster.EtcdMembers != 1 && s.Cluster.EtcdMembers != 3 {
				return usageError{err: fmt.Errorf("--etcd-members %d: 1 or 3", s.Cluster.EtcdMembers)}
			}
			if s.Cluster.Nodes < 2 {
				return usageError{err: fmt.Errorf("--nodes %d: at least 2", s.Cluster.Nodes)}
			}
			s.Workloads = strings.Split(workloads, ",")
			if selfTest && !cmd.Flags().Changed("workloads") {
				s.Workloads = chaos.DefaultWorkloads // what the planted bugs' triggers are tuned to
			}
			if _, err := chaos.NewWorkloads(s.Workloads, "x", 0, "", 0, 0); err != nil {
				return usageError{err: err}
			}
			dir, cleanup, err := workDirFor(workDir, keep)
			if err != nil {
				return err
			}
			defer func() {
				if !cleanup(rerr != nil) {
					s.Cluster.Logf("verify: work directory kept: %s", dir)
				}
			}()
			s.Cluster.WorkDir = filepath.Join(dir, "cluster")
			s.ArtifactDir = filepath.Join(dir, "artifacts")
			if s.Cluster.BinDir, err = findBinaries(binDir, dir, s.Cluster.Logf); err != nil {
				return err
			}
			// Kinds are checked against a cluster of this shape before
			// anything starts.
			probe := chaos.ProbeFaults(s.Cluster)
			if s.Faults, err = probe.ParseKinds(faults, true); err != nil {
				return usageError{err: fmt.Errorf("--faults: %w", err)}
			}
			if planted != "" {
				s.Cluster.Env = append(s.Cluster.Env, "MESHLOC_PLANT="+planted)
				defer failpoint.Plant(strings.Split(planted, ",")...)()
			}
			s.Cluster.Logf("verify: work directory %s (kept: %v)", dir, keep)
			if selfTest {
				return runSelfTest(cmd, s, out)
			}
			rep, err := chaos.Run(cmd.Context(), s)
			if err != nil {
				return err
			}
			fmt.Fprint(out, rep.Text())
			if reportJSON != "" {
				b, err := rep.JSON()
				if err == nil {
					err = os.WriteFile(reportJSON, b, 0o644)
				}
				if err != nil {
					return err
				}
			}
			if rep.Failed() {
				return errVerifyFailed
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&s.Duration, "duration", time.Minute, "how long the load runs (faults are injected during it)")
	f.StringVar(&faults, "faults", "all", "comma-separated fault kinds, cycled; all; none")
	f.DurationVar(&s.FirstFault, "first-fault", 5*time.Second, "when the first fault starts")
	f.DurationVar(&s.FaultEvery, "fault-every", 20*time.Second, "time between two faults' starts (a fault waits for the previous one to heal)")
	f.StringVar(&workloads, "workloads", strings.Join(chaos.Workloads, ","), "comma-separated workloads")
	f.IntVar(&s.Streams, "streams", 3, "client streams per workload")
	f.IntVar(&s.Groups, "groups", 0, "put the counter and list objects into this many groups each; the storm then moves whole groups")
	f.IntVar(&s.Rotate, "rotate", 300, "list and bank objects are replaced by fresh ones after this many acknowledged writes (their reads return the whole state; 0: never)")
	f.IntVar(&s.Cluster.Nodes, "nodes", 3, "meshnode processes")
	f.StringVar(&s.Cluster.StateStore, "state-store", "etcd", "where the nodes keep durable state: etcd, or postgres (a PostgreSQL server started for the run, from Debian's postgresql package)")
	f.IntVar(&s.Cluster.EtcdMembers, "etcd-members", 3, "etcd members: 1 or 3 (each a locationd process)")
	f.BoolVar(&s.Cluster.Proxies, "proxies", true, "TCP proxies on node links (needed by the partition and link faults)")
	f.DurationVar(&s.Cluster.LeaseTTL, "lease-ttl", 2*time.Second, "the nodes' lease TTL")
	f.Uint64Var(&s.Seed, "seed", 0, "seed of the fault victims (0: random)")
	f.StringVar(&binDir, "bin-dir", "", "directory of the locationd and meshnode binaries")
	f.StringVar(&workDir, "work-dir", "", "directory for data, logs, history and report (default: a temporary one)")
	f.BoolVar(&keep, "keep", false, "keep the work directory (always kept when the run fails)")
	f.StringVar(&planted, "plant", "", "plant these bugs (comma-separated; failpoints build) — the report must fail")
	f.BoolVar(&selfTest, "self-test", false, "run the planted-bug self-test (one run per bug, --duration each) instead")
	f.StringVar(&reportJSON, "report-json", "", "also write the report as JSON to this file")
	return cmd
}

func runSelfTest(cmd *cobra.Command, s chaos.Spec, out io.Writer) error {
	s.Faults = nil
	ctl := chaos.ControlSpec(s)
	s.Cluster.Logf("verify: control run: every trigger, no bug planted")
	crep, err := chaos.Run(cmd.Context(), ctl)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "control run (every trigger, no bug): failed=%v (%s)\n", crep.Failed(), chaos.Caught(crep))
	rs, err := chaos.SelfTest(cmd.Context(), s, nil)
	for _, r := range rs {
		fmt.Fprintf(out, "%-24s detected=%-5v by %s  [trigger: %s; run %d of %d, %.0fs]%s\n", r.Bug, r.Detected, r.By, r.Trigger, r.Runs, r.MaxRuns, r.Seconds, errSuffix(r.Err))
	}
	fmt.Fprintln(out, chaos.PlantedFigure(rs))
	if err != nil {
		return err
	}
	if crep.Failed() {
		fmt.Fprint(out, crep.Text())
		return errVerifyFailed
	}
	for _, r := range rs {
		if !r.Detected {
			return errVerifyFailed
		}
	}
	return nil
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return " error: " + e
}

// workDirFor is dir (created) or a new temporary directory, removed by
// cleanup unless keep or the run failed; cleanup reports whether it removed
// it.
func workDirFor(dir string, keep bool) (string, func(failed bool) bool, error) {
	if dir != "" {
		return dir, func(bool) bool { return false }, os.MkdirAll(dir, 0o755)
	}
	d, err := os.MkdirTemp("", "meshloc-verify-")
	if err != nil {
		return "", nil, err
	}
	return d, func(failed bool) bool {
		if keep || failed {
			return false
		}
		return os.RemoveAll(d) == nil
	}, nil
}

// findBinaries: dir if given; else meshctl's own directory when it holds
// locationd and meshnode; else a failpoints build into <work>/bin when the
// current directory is inside the meshloc module.
func findBinaries(dir, work string, logf func(string, ...any)) (string, error) {
	has := func(d string) bool {
		for _, b := range []string{"locationd", "meshnode"} {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				return false
			}
		}
		return true
	}
	if dir != "" {
		if !has(dir) {
			return "", usageError{err: fmt.Errorf("--bin-dir %s does not hold locationd and meshnode", dir)}
		}
		return dir, nil
	}
	if exe, err := os.Executable(); err == nil && has(filepath.Dir(exe)) {
		return filepath.Dir(exe), nil
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(gomod)), "go.mod") {
		return "", errors.New("no locationd and meshnode binaries next to meshctl and not inside the meshloc module: build them with go build -tags failpoints -o bin/ ./cmd/... and pass --bin-dir bin")
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	bin := filepath.Join(work, "bin")
	logf("verify: building locationd and meshnode with -tags failpoints into %s", bin)
	build := exec.Command("go", "build", "-tags", "failpoints", "-o", bin+string(filepath.Separator), "./cmd/locationd", "./cmd/meshnode")
	build.Dir = root
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, b)
	}
	return bin, nil
}
