// Command locationd serves meshloc's location API over an embedded etcd (the
// default) or an existing etcd cluster. See docs/design.md §8 and §10, and
// internal/locationd for what it serves.
//
// Flags, environment (LOCATIOND_<FLAG>, e.g. LOCATIOND_DATA_DIR) and signals
// only: SIGINT or SIGTERM shuts it down cleanly, exit status 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshloc/meshloc/internal/cliutil"
	"github.com/meshloc/meshloc/internal/demo"
	"github.com/meshloc/meshloc/internal/fanout"
	"github.com/meshloc/meshloc/internal/locationd"
	"github.com/meshloc/meshloc/internal/logging"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/tracing"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError marks a command line (or environment) that cannot be run.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// errNotImplemented is a subcommand reserved for a later release.
var errNotImplemented = errors.New("not yet implemented")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv)
	stop()
	os.Exit(code)
}

// run is main without the process: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) int {
	cmd := newRoot(stdout, stderr, lookup)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errNotImplemented):
		fmt.Fprintf(stderr, "locationd: %v\n", err)
		return exitUsage
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "locationd: usage: %v (see locationd --help)\n", err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "locationd: %v\n", err)
		return exitError
	}
}

func newRoot(stdout, stderr io.Writer, lookup func(string) (string, bool)) *cobra.Command {
	cfg := locationd.DefaultConfig()
	gofs := flag.NewFlagSet("locationd", flag.ContinueOnError)
	cfg.AddFlags(gofs)
	var tc tracing.Config // its API requests, and the node requests they make
	tc.Service = "locationd"
	tc.AddFlags(gofs)

	root := &cobra.Command{
		Use:   "locationd",
		Short: "meshloc's location service: who owns which object, over etcd",
		Long: `locationd serves meshloc's location API (GET /v1/owners, /v1/objects,
/v1/objects/{object}, /healthz, /readyz, /metrics) on --http. With no
--etcd-endpoints it runs an embedded etcd in --data-dir.

The embedded etcd can be one member of a cluster: start one locationd per
member, each with its --name, --data-dir and URLs, and the same
--initial-cluster (name=peerURL,…) and --initial-cluster-token, e.g.

  locationd --name m1 --data-dir d1 --http 127.0.0.1:7071 \
    --listen-client http://127.0.0.1:12379 --listen-peer http://127.0.0.1:12380 \
    --initial-cluster m1=http://127.0.0.1:12380,m2=http://127.0.0.1:22380,m3=http://127.0.0.1:32380

Every member serves the API. A member restarted with its --data-dir rejoins
(etcd then ignores the --initial-cluster* flags).

Every flag can also be set by the environment: LOCATIOND_<FLAG>, e.g.
LOCATIOND_DATA_DIR or LOCATIOND_ETCD_ENDPOINTS; a flag given wins.`,
		Args:          noArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cliutil.ApplyEnv(cmd.Flags(), locationd.EnvPrefix, lookup); err != nil {
				return usageError{err}
			}
			log, err := logging.New(stderr, cfg.LogLevel, cfg.LogFormat, "locationd")
			if err != nil {
				return usageError{err}
			}
			stopTracing, err := startTracing(cmd.Context(), tc)
			if err != nil {
				return err
			}
			defer stopTracing()
			srv, err := locationd.New(cfg, log)
			if err != nil {
				return usageError{err}
			}
			defer cliutil.ReloadOnHangup(log, srv.ReloadTLS)()
			if err := srv.Run(cmd.Context()); err != nil {
				log.Error().Err(err).Msg("locationd stopped")
				return err
			}
			log.Info().Msg("locationd stopped")
			return nil
		},
	}
	root.PersistentFlags().AddGoFlagSet(gofs)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	root.AddCommand(demoCmd(&cfg, &tc, stdout, stderr, lookup))
	root.AddCommand(watchProxyCmd(&cfg, &tc, stderr, lookup))
	cliutil.SetVersion(root)
	return root
}

// demoCmd is `locationd demo`: embedded etcd + 3 in-process nodes + a live,
// checked workload (internal/demo). Its data directory is a fresh temporary
// one unless --data-dir is given, so every demo starts empty.
func demoCmd(cfg *locationd.Config, tc *tracing.Config, stdout, stderr io.Writer, lookup func(string) (string, bool)) *cobra.Command {
	dc := demo.DefaultConfig()
	nodes := strings.Join(dc.Nodes, ",")
	var nodeHTTP string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "embedded etcd + 3 in-process meshnodes + a live, checked workload, printing progress",
		Long: `locationd demo starts locationd (embedded etcd, the location API and its
dashboard, whose URL it prints first), three meshnodes in this process (n1..n3
on --nodes, each with /metrics on --node-http), and a workload of --workers callers
over counter, list and bank objects. Every reply is checked against what the
caller expects, and every object's final state is checked at the end. It prints
one progress line every --every; Ctrl-C (or --duration) ends it. While it runs,
meshctl works against it (meshctl objects, meshctl call --node 127.0.0.1:7100 ...).`,
		Args:          noArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cliutil.ApplyEnv(cmd.Flags(), locationd.EnvPrefix, lookup); err != nil {
				return usageError{err}
			}
			if !cmd.Flags().Changed("data-dir") {
				dir, err := os.MkdirTemp("", "meshloc-demo-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				cfg.DataDir = dir
			}
			dc.Locationd = *cfg
			dc.Nodes = strings.Split(nodes, ",")
			if nodeHTTP != "" {
				dc.NodeHTTP = strings.Split(nodeHTTP, ",")
			}
			// The demo's own lines are its output: its log shows warnings
			// and errors only, as readable text, unless told otherwise.
			level, format := "warn", "console"
			if cmd.Flags().Changed("log-level") {
				level = cfg.LogLevel
			}
			if cmd.Flags().Changed("log-format") {
				format = cfg.LogFormat
			}
			log, err := logging.New(stderr, level, format, "")
			if err != nil {
				return usageError{err}
			}
			stopTracing, err := startTracing(cmd.Context(), *tc) // its nodes' and locationd's spans
			if err != nil {
				return err
			}
			defer stopTracing()
			return demo.Run(cmd.Context(), dc, stdout, log)
		},
	}
	cmd.Flags().DurationVar(&dc.Duration, "duration", 0, "run this long, then check and exit (0: until Ctrl-C)")
	cmd.Flags().IntVar(&dc.Workers, "workers", dc.Workers, "concurrent callers")
	cmd.Flags().IntVar(&dc.Objects, "objects", dc.Objects, "objects per worker and type")
	cmd.Flags().StringVar(&nodes, "nodes", nodes, "gRPC addresses of the in-process nodes (comma-separated)")
	cmd.Flags().StringVar(&nodeHTTP, "node-http", "", "HTTP addresses (/metrics, /healthz) of the in-process nodes, one per node (default: each gRPC port + 1)")
	cmd.Flags().DurationVar(&dc.Every, "every", dc.Every, "interval between progress lines")
	cmd.Flags().DurationVar(&dc.LeaseTTL, "lease-ttl", dc.LeaseTTL, "owner lease TTL of the nodes")
	cmd.Flags().BoolVar(&dc.Relocate, "relocations", dc.Relocate, "keep moving the objects the workload uses between the nodes (--relocations=false: never move)")
	cmd.Flags().BoolVar(&dc.ForegroundRelocations, "foreground-relocations", dc.ForegroundRelocations, "start the demo's relocations at once, however busy the workers keep the nodes (by default they are background relocations, paced while calls wait)")
	return cmd
}

// watchProxyCmd is `locationd watch-proxy`: a watch fan-out (internal/fanout)
// in front of the etcd that locationd's flags name.
func watchProxyCmd(cfg *locationd.Config, tc *tracing.Config, stderr io.Writer, lookup func(string) (string, bool)) *cobra.Command {
	fc := fanout.Config{Listen: fanout.DefaultListen, HTTP: fanout.DefaultHTTP, History: fanout.DefaultHistory, Queue: fanout.DefaultQueue}
	cmd := &cobra.Command{
		Use:   "watch-proxy",
		Short: "a watch fan-out: every node's location cache follows etcd through one etcd watch",
		Long: `locationd watch-proxy serves etcd's Watch API on --listen for the cluster's
authority/ and owners/ keys (--prefix, --cluster), from one etcd watch per
range however many nodes follow them. Start nodes (and Go clients) with
--etcd-watch-endpoints http://<--listen>: their location caches and owner
directories then follow etcd through it, while every read and transaction
still goes to etcd under the node's own identity.

It reaches the etcd of --etcd-endpoints, or without them the embedded etcd
of a locationd beside it (--listen-client), with the --etcd-* files; give it
the read-only etcd identity (etcd-watch.crt of meshctl certs init). With
--cert-file, --key-file and --trusted-ca-file it serves TLS and requires
client certificates of that CA (the nodes present their --etcd-cert).
/metrics and /healthz are on --http (here 127.0.0.1:23791).`,
		Args:          noArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cliutil.ApplyEnv(cmd.Flags(), locationd.EnvPrefix, lookup); err != nil {
				return usageError{err}
			}
			log, err := logging.New(stderr, cfg.LogLevel, cfg.LogFormat, "watch-proxy")
			if err != nil {
				return usageError{err}
			}
			if fc.Keys, err = keyspace.New(cfg.Prefix, cfg.Cluster); err != nil {
				return usageError{err}
			}
			endpoints := cfg.EtcdEndpoints
			if len(endpoints) == 0 {
				endpoints = []string{cfg.ListenClient}
			}
			fc.Etcd, fc.TLS, fc.Insecure = cfg.Etcd(endpoints), cfg.TLSFiles(), cfg.Insecure
			if err := fc.Validate(); err != nil {
				return usageError{err}
			}
			// (It makes no spans of its own; the flags it shares with
			// locationd are checked all the same.)
			if err := tc.Validate(); err != nil {
				return usageError{err}
			}
			if err := fanout.Run(cmd.Context(), fc, log, nil); err != nil {
				log.Error().Err(err).Msg("watch-proxy stopped")
				return err
			}
			log.Info().Msg("watch-proxy stopped")
			return nil
		},
	}
	cmd.Flags().StringVar(&fc.Listen, "listen", fc.Listen, "host:port the fan-out serves etcd's Watch API on (the nodes' --etcd-watch-endpoints)")
	cmd.Flags().StringVar(&fc.HTTP, "http", fc.HTTP, "host:port of /metrics and /healthz (empty: off)")
	cmd.Flags().IntVar(&fc.History, "history-events", fc.History, "recent events kept per range for followers that join behind")
	cmd.Flags().IntVar(&fc.Queue, "client-queue", fc.Queue, "responses queued per client stream; a client that lets it fill is cut (it resumes)")
	return cmd
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args)}
	}
	return nil
}

// startTracing sets tracing up as tc says (pkg/tracing: off unless an
// endpoint is configured); stop flushes what is buffered, a collector gone
// being nobody's failure.
func startTracing(ctx context.Context, tc tracing.Config) (stop func(), err error) {
	shutdown, err := tracing.Setup(ctx, tc, "")
	if err != nil {
		return nil, usageError{err}
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdown(ctx)
	}, nil
}
