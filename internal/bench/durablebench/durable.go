// Package durablebench is meshctl bench's durable section (opt-in:
// `meshctl bench --only durable`): what a durable object's write and wake
// cost in each state store (pkg/statestore), each figure beside a baseline
// of the same run on the same server.
//
//   - durable write p50 with the etcd store: one caller adding to 64 awake
//     dcounters in turn on a node with the default store, in blocks of 50
//     alternating with blocks of etcd CAS transactions on the same etcd
//     (baseline.CAS; no bound: the ratio is printed, to be read beside the
//     lifecycle section's write, the same measure), and with an awake
//     memory counter's add (the call's path without a store);
//   - the PostgreSQL store's write (the bound: 1.5×): postgres.Store from
//     this process writing a dcounter's change and its reply, as a node
//     does, beside a bare conditional UPDATE of a one-row table, with pgx,
//     of a value as large as a dcounter's persisted one, on a server the
//     section launches itself (internal/pgserver, in a temporary directory
//     removed after); interleaved with them, the same adds as above on a
//     node started with --state-store naming that server (printed, no
//     bound: a call's path is in it);
//   - the PostgreSQL store's claim and read of a 1 MiB state under a new
//     fence (the bound: 1.5×), as a wake's, beside a SELECT of a 1 MiB
//     bytea row of the same server; interleaved with them, a call that
//     wakes a sleeping dblob of 1 MiB on the node (its --sleep-after):
//     printed, no bound, as it also holds etcd's wake transaction.
//
// The section runs in internal/bench's run (nodes are its child
// processes, on an etcd of the section's own): Env is what it gives.
package durablebench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/bench/baseline"
	"github.com/meshloc/meshloc/internal/bench/report"
	"github.com/meshloc/meshloc/internal/pgserver"
	"github.com/meshloc/meshloc/pkg/client"
)

// Plan sizes the section; a zero field takes DefaultPlan's.
type Plan struct {
	// Writes is how many durable writes are measured on each store, and
	// as many baseline operations beside them (500).
	Writes int
	// Wakes is how many 1 MiB objects are put to sleep and woken (50).
	Wakes int
	// SleepAfter is the PostgreSQL node's --sleep-after (2s).
	SleepAfter time.Duration
}

// DefaultPlan is the plan meshctl bench runs: well under 2 minutes.
func DefaultPlan() Plan { return Plan{Writes: 500, Wakes: 50, SleepAfter: 2 * time.Second} }

// Env is what the section runs on, from internal/bench.
type Env struct {
	// Etcd is a client of the section's own etcd (the nodes' records).
	Etcd *clientv3.Client
	// StartNode starts a meshnode child named name on that etcd (its HTTP
	// API, with /metrics, on web; "" for none; more meshnode flags in
	// args), returns once it serves, with a client that calls through it
	// and stop, which ends it. One node runs at a time: it is alone.
	StartNode func(ctx context.Context, name, web string, args ...string) (cl *client.Client, stop func(), err error)
	// Step reports the start of a step; Base records a baseline, Fig a
	// figure beside the baseline (or figure) of that name, with its bound.
	Step func(format string, a ...any)
	Base func(report.Measure)
	Fig  func(m report.Measure, baseline string, t *report.Target)
}

// StateBytes is the state of the objects the wakes are measured on.
const StateBytes = 1 << 20

// The figures and baselines of the section, by name.
const (
	etcdCAS      = "durable: etcd CAS p50, the same etcd"
	etcdWrite    = "durable: write p50, etcd store (an awake dcounter's add)"
	pgUpdate     = "durable: PostgreSQL one-row conditional UPDATE p50"
	pgWrite      = "durable: write p50, PostgreSQL store (an awake dcounter's add)"
	pgStoreWrite = "durable: write p50 at the store, PostgreSQL (a dcounter's change and reply)"
	pgStoreLoad  = "durable: claim and read p50 at the store, PostgreSQL, a 1 MiB state"
	memCall      = "durable: call p50, an awake memory counter's add"
	pgRead       = "durable: PostgreSQL SELECT of a 1 MiB bytea row p50"
	pgWake       = "durable: wake + call p50, a 1 MiB dblob asleep, PostgreSQL store"
	writeObjects = 64  // the dcounters the writes go to, in turn
	block        = 50  // figure and baseline alternate in blocks of this many
	bound        = 1.5 // the PostgreSQL figures' bound, × their baseline
)

// ErrNoPostgres: the section needs PostgreSQL's server binaries.
var ErrNoPostgres = errors.New("bench: the durable section launches a PostgreSQL server and found no PostgreSQL binaries (initdb, postgres): " +
	"install them with `apt-get install postgresql` (Debian; they land in /usr/lib/postgresql/<version>/bin), or set MESHLOC_PG_BIN to their directory")

// Check returns ErrNoPostgres when PostgreSQL's binaries are missing: a run
// asked for the section checks before it measures anything.
func Check() error {
	bin := pgserver.Bin()
	if bin == "" {
		return ErrNoPostgres
	}
	if _, err := os.Stat(filepath.Join(bin, "initdb")); err != nil {
		return fmt.Errorf("%w (%s has no initdb: is MESHLOC_PG_BIN right?)", ErrNoPostgres, bin)
	}
	return nil
}

// Run measures the section (a zero field of p: DefaultPlan's).
func Run(ctx context.Context, env Env, p Plan) error {
	def := DefaultPlan()
	if p.Writes <= 0 {
		p.Writes = def.Writes
	}
	if p.Wakes <= 0 {
		p.Wakes = def.Wakes
	}
	if p.SleepAfter <= 0 {
		p.SleepAfter = def.SleepAfter
	}
	if err := Check(); err != nil {
		return err
	}
	if err := etcdWrites(ctx, env, p); err != nil {
		return err
	}
	return postgres(ctx, env, p)
}

// etcdWrites measures the durable write on a node with the etcd store,
// beside etcd's CAS.
func etcdWrites(ctx context.Context, env Env, p Plan) error {
	env.Step("durable: %d adds to %d awake dcounters on a node with the etcd store, one caller, in blocks of %d alternating with etcd CAS transactions", p.Writes, writeObjects, block)
	cl, stop, err := env.StartNode(ctx, "e1", "")
	if err != nil {
		return err
	}
	defer stop()
	cas, err := baseline.NewCAS(ctx, env.Etcd, "/bench/durable-cas")
	if err != nil {
		return err
	}
	add := adder(ctx, cl, "actor/dcounter/etcd-w")
	if err := warm(add); err != nil {
		return err
	}
	mem := adder(ctx, cl, "actor/counter/m")
	if err := warm(mem); err != nil {
		return err
	}
	d, err := interleave(p.Writes, block, add, func(int) error { _, err := cas.Step(ctx); return err }, mem)
	if err != nil {
		return err
	}
	writes, cases, calls := d[0], d[1], d[2]
	env.Base(measure(etcdCAS, cases, ""))
	env.Base(measure(memCall, calls, "the call's path alone: the same client, node and caller, no store"))
	env.Fig(measure(etcdWrite, writes, fmt.Sprintf("p99 %.2f ms; the lifecycle section's durable write p50 is the same measure", ms(pct(writes, 99)))), etcdCAS, nil)
	return nil
}

// adder returns a write: an add to the i-th of writeObjects dcounters
// named prefix0….
func adder(ctx context.Context, cl *client.Client, prefix string) func(i int) error {
	return func(i int) error {
		if _, err := cl.Call(ctx, prefix+strconv.Itoa(i%writeObjects), "add", "1"); err != nil {
			return fmt.Errorf("bench: durable: add to %s%d: %w", prefix, i%writeObjects, err)
		}
		return nil
	}
}

// warm makes the dcounters live (a first call activates one: not a
// write of an awake object).
func warm(add func(int) error) error {
	for i := range writeObjects {
		if err := add(i); err != nil {
			return err
		}
	}
	return nil
}

// interleave runs each of runs n times (i from 0 to n-1), in blocks of
// block in turn (so that a burst of load from elsewhere falls on all), and
// returns their latencies, in the order of runs.
func interleave(n, block int, runs ...func(i int) error) ([][]time.Duration, error) {
	out := make([][]time.Duration, len(runs))
	for len(out[0]) < n {
		k := min(block, n-len(out[0]))
		for r, run := range runs {
			for range k {
				i := len(out[r])
				t0 := time.Now()
				if err := run(i); err != nil {
					return nil, err
				}
				out[r] = append(out[r], time.Since(t0))
			}
		}
	}
	return out, nil
}

// measure is the p50 of d in milliseconds.
func measure(name string, d []time.Duration, note string) report.Measure {
	return report.Measure{Name: name, Value: ms(pct(d, 50)), Unit: "ms", N: int64(len(d)), Note: note}
}

// pct and ms are report.Pct and report.Ms.
func pct(d []time.Duration, p float64) time.Duration { return report.Pct(d, p) }
func ms(d time.Duration) float64                     { return report.Ms(d) }
