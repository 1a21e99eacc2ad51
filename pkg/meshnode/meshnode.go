// Package meshnode is a meshnode process in one call: Main runs a node of
// your object types exactly as the meshnode command runs the built-in ones —
// every flag of node.Config (and --version, --log-level, --log-format),
// their MESHNODE_* environment mirrors, logs on stderr, SIGTERM or SIGINT
// drains then stops it (a second one stops at once), a drain asked
// through AdminService (meshctl drain) stops it too, a lease it lost
// fences and stops it, SIGHUP reloads its TLS certificate. cmd/meshnode is
// Main with the built-in types; a program that hosts types of its own
// calls it the same way (examples/cart, examples/inventory):
//
//	func main() {
//		os.Exit(meshnode.Main(meshnode.Register(cart.Register)))
//	}
//
// Exit status: 0 after a drain (even if some objects could not be moved:
// the log lists them), 2 for a command line that cannot run, 1 otherwise.
package meshnode

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshloc/meshloc/internal/cliutil"
	"github.com/meshloc/meshloc/internal/nodemain"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/node"
)

// Option changes what Main runs.
type Option func(*options)

type options struct {
	name     string
	register []func(*actor.Registry) error
	flags    []func(*flag.FlagSet)
	nodeOpts []node.Option
}

// Named is the command's name in its usage, errors and logs (default
// "meshnode").
func Named(name string) Option { return func(o *options) { o.name = name } }

// Register adds object types to the node's registry; it runs after the
// command line was read, so it may use the values of Flags.
func Register(f func(*actor.Registry) error) Option {
	return func(o *options) { o.register = append(o.register, f) }
}

// Flags adds flags of the program's own beside the node's (each with an
// environment mirror too).
func Flags(f func(*flag.FlagSet)) Option { return func(o *options) { o.flags = append(o.flags, f) } }

// NodeOptions are passed to node.New (a callback when ready, a metrics
// registry, ...; the logger and the registry are Main's).
func NodeOptions(opts ...node.Option) Option {
	return func(o *options) { o.nodeOpts = append(o.nodeOpts, opts...) }
}

// Main runs the node with os.Args, stdout, stderr and the environment, and
// returns the process's exit status.
func Main(opts ...Option) int {
	return Run(os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv, opts...)
}

// Run is Main without the process: the arguments after the command's name,
// its output and its environment.
func Run(args []string, stdout, stderr io.Writer, lookup func(string) (string, bool), opts ...Option) int {
	o := options{name: "meshnode"}
	for _, f := range opts {
		f(&o)
	}
	cmd := newRoot(o, stdout, stderr, lookup)
	cmd.SetArgs(args)
	err := cmd.Execute()
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "%s: usage: %v (see %s --help)\n", o.name, err, o.name)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "%s: %v\n", o.name, err)
		return exitError
	}
}

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

func newRoot(o options, stdout, stderr io.Writer, lookup func(string) (string, bool)) *cobra.Command {
	cfg := node.DefaultConfig()
	gofs := flag.NewFlagSet(o.name, flag.ContinueOnError)
	cfg.AddFlags(gofs)
	for _, f := range o.flags {
		f(gofs)
	}
	root := &cobra.Command{
		Use:   o.name + " --name NAME [flags]",
		Short: "a meshloc node: hosts objects, routes calls to their owners",
		Long: o.name + ` is a meshloc node: it owns objects (the types it registers, or
those of them --types names) while its lease in etcd lives,
serves calls to them on --listen (gRPC), routes calls for other objects to
their owners as a gateway, and moves objects to and from other nodes
(relocation, drain). /metrics, /healthz (the lease is valid) and /readyz
(serving, and etcd takes writes: it fails with the reason while etcd's
NOSPACE alarm is on) are on --http.

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
			prog := nodemain.Program{Name: o.name, Register: o.register, NodeOptions: o.nodeOpts}
			if err := nodemain.Serve(cfg, stderr, prog); err != nil {
				if u := (nodemain.UsageError{}); errors.As(err, &u) {
					return usageError{u.Err}
				}
				return err
			}
			return nil
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
