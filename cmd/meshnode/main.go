// Command meshnode hosts objects and routes calls to their owners: a thin
// main on pkg/node with the built-in object types (pkg/actor/builtin).
// SIGTERM or SIGINT drains it (every hosted object is moved to another node,
// bounded by --drain-timeout), then stops it (its lease revoked last); a
// second SIGTERM or SIGINT skips the rest of the drain and stops at once. A
// drain asked through AdminService (meshctl drain) stops it too. Exit status
// 0 after a drain, even if some objects could not be moved (the log lists
// them); 2 for a command line that cannot run; 1 otherwise. SIGHUP reloads
// its TLS certificate.
//
// A program that hosts object types of its own does the same with
// pkg/node: see examples/cart.
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

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/meshloc/meshloc/internal/cliutil"
	"github.com/meshloc/meshloc/internal/logging"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/node"
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

// errFailed: the node ran and ended badly (its lease was lost); the log
// says why.
var errFailed = errors.New("the node's lease ended")

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv))
}

// run is main without the process: it returns the exit status.
func run(args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) int {
	cmd := newRoot(stdout, stderr, lookup)
	cmd.SetArgs(args)
	err := cmd.Execute()
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "meshnode: usage: %v (see meshnode --help)\n", err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "meshnode: %v\n", err)
		return exitError
	}
}

func newRoot(stdout, stderr io.Writer, lookup func(string) (string, bool)) *cobra.Command {
	cfg := node.DefaultConfig()
	gofs := flag.NewFlagSet("meshnode", flag.ContinueOnError)
	cfg.AddFlags(gofs)
	root := &cobra.Command{
		Use:   "meshnode --name NAME [flags]",
		Short: "a meshloc node: hosts objects, routes calls to their owners",
		Long: `meshnode is a meshloc node: it owns objects (the built-in types of
pkg/actor/builtin, or those --types names) while its lease in etcd lives,
serves calls to them on --listen (gRPC), routes calls for other objects to
their owners as a gateway, and moves objects to and from other nodes
(relocation, drain). /metrics and /healthz are on --http.

SIGTERM or SIGINT drains it (every object it hosts moves to another node,
at most --drain-timeout), then stops it; a second signal stops it at once.
SIGHUP reloads its TLS certificate and key.

Every flag can also be set by the environment: ` + node.EnvPrefix + `<FLAG>,
e.g. ` + node.EnvPrefix + `ETCD_ENDPOINTS or ` + node.EnvPrefix + `LEASE_TTL; a flag given wins.
The mirrors of this build:
` + envList(gofs),
		Example: `  # one node against locationd's embedded etcd (the default endpoints)
  meshnode --name n1 --listen 127.0.0.1:7100 --http 127.0.0.1:7101

  # a gateway only: routes calls, hosts nothing
  meshnode --name gw --listen 127.0.0.1:7300 --weight 0

  # with mutual TLS (meshctl certs init made the files)
  meshnode --name n1 --cert-file certs/n1.crt --key-file certs/n1.key \
    --trusted-ca-file certs/ca.crt --etcd-endpoints https://127.0.0.1:2379 \
    --etcd-cacert certs/ca.crt --etcd-cert certs/n1-etcd.crt --etcd-key certs/n1-etcd.key`,
		Args:          noArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cliutil.ApplyEnv(cmd.Flags(), node.EnvPrefix, lookup); err != nil {
				return usageError{err}
			}
			return serve(cfg, stderr)
		},
	}
	root.Flags().AddGoFlagSet(gofs)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cliutil.SetVersion(root)
	return root
}

// envList lists the environment mirror of every flag, one per line.
func envList(fs *flag.FlagSet) string {
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		fmt.Fprintf(&b, "  %-42s --%s\n", cliutil.EnvName(node.EnvPrefix, f.Name), f.Name)
	})
	return b.String()
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args)}
	}
	return nil
}

// serve runs the node until a signal, a drain through AdminService, or the
// end of its lease.
func serve(cfg node.Config, stderr io.Writer) error {
	log, err := logging.New(stderr, cfg.LogLevel, cfg.LogFormat, "meshnode")
	if err != nil {
		return usageError{err}
	}
	reg := actor.NewRegistry()
	if err := builtin.Register(reg); err != nil {
		return err
	}
	n, err := node.New(cfg, node.WithRegistry(reg), node.WithLogger(log))
	if err != nil {
		return usageError{err}
	}
	// The first SIGTERM/SIGINT cancels ctx (start, or drain then stop); a
	// second one cancels skip (the drain ends, the node stops at once).
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, onSignal := context.WithCancel(context.Background())
	defer onSignal()
	skip, onSecond := context.WithCancel(context.Background())
	defer onSecond()
	go watchSignals(log, sigs, onSignal, onSecond) // ends with the process
	if err := n.Start(ctx); err != nil {
		return err
	}
	defer cliutil.ReloadOnHangup(log, n.ReloadTLS)()
	clean := false // told to stop: exit status 0
	select {
	case <-ctx.Done():
		log.Info().Dur("drainTimeout", cfg.DrainTimeout).Msg("signal: draining, then stopping (a second SIGTERM or SIGINT stops at once)")
		drain(skip, log, n, cfg)
		clean = true
	case <-n.StopRequested():
		log.Info().Msg("drained through AdminService: stopping")
		clean = true
	case <-n.Fenced():
		log.Error().Err(n.Keeper().Err()).Msg("lease ended: stopping")
	}
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := n.Stop(sctx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	if n.Keeper().Err() != nil && !clean && ctx.Err() == nil {
		return errFailed
	}
	return nil
}

// watchSignals turns the first signal into onSignal and the second into
// onSecond.
func watchSignals(log zerolog.Logger, sigs <-chan os.Signal, onSignal, onSecond context.CancelFunc) {
	s := <-sigs
	log.Info().Str("signal", s.String()).Msg("signal received")
	onSignal()
	s = <-sigs
	log.Warn().Str("signal", s.String()).Msg("second signal: skipping the rest of the drain")
	onSecond()
}

// drain moves every hosted object away (node.Drain), bounded by
// --drain-timeout plus the end of the relocations in flight then, or until
// skip ends.
func drain(skip context.Context, log zerolog.Logger, n *node.Node, cfg node.Config) {
	ctx, cancel := context.WithTimeout(skip, cfg.DrainTimeout+cfg.RelocationTimeout+10*time.Second)
	defer cancel()
	rep, err := n.Drain(ctx, node.DrainOptions{})
	if err != nil {
		log.Error().Err(err).Msg("drain failed: stopping anyway")
		return
	}
	// The node logged the report ("drained") and each object not moved.
	log.Info().Int("moved", len(rep.Moved)).Int("failed", len(rep.Failed)).Msg("drain ended: stopping")
}
