package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshloc/meshloc/internal/cliutil"
	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/mtls"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/wire"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// envPrefix mirrors every global flag: --locationd is MESHCTL_LOCATIOND.
const envPrefix = "MESHCTL_"

// usageError marks a command line that cannot be run (exit status 2). code
// is the first word of its line: "usage" when empty; api.CodeInvalidArgument
// for a name or address that does not parse (badArgument).
type usageError struct {
	err  error
	code string
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// globals are the flags every subcommand shares.
type globals struct {
	locationd string
	node      string
	// etcdEndpoints, when set, make call route from etcd straight to owners.
	etcdEndpoints []string
	output        string
	timeout       time.Duration
	lookup        func(string) (string, bool)
	// tls: the caller's certificate (--cacert, --cert, --key): locationd's
	// API over HTTPS and the nodes' gRPC port with mutual TLS.
	tls mtls.Files
	// etcd: how call --etcd-endpoints reaches a secured etcd.
	etcd mtls.Etcd
}

// httpClient is the HTTP client of every request to locationd: with TLS,
// it presents the caller's certificate and accepts only a locationd's.
func (g *globals) httpClient() (*http.Client, error) {
	if !g.tls.Enabled() {
		return http.DefaultClient, nil
	}
	r, err := mtls.Load(g.tls)
	if err != nil {
		return nil, usageError{err: err}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: r.ClientConfig(mtls.WantRole(mtls.RoleLocationd))}}, nil
}

// run is main without the process: it executes args and returns the exit
// status, having written at most one error line to stderr. It is the one
// place that decides the exit status: 2 for a usageError, 1 for any other
// error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) int {
	root, tr := newTracedRoot(stdout, lookup)
	root.SetErr(stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	tr.finish(err, stderr) // trace.go

	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, errorLine(err))
	if errors.As(err, new(usageError)) {
		return exitUsage
	}
	return exitError
}

// errorLine is the one line meshctl prints for err: "meshctl: <code>: <message>".
func errorLine(err error) string {
	var msg string
	if ue := new(usageError); errors.As(err, ue) {
		if ue.code != "" {
			msg = ue.code + ": " + err.Error()
		} else {
			msg = "usage: " + err.Error() + " (see meshctl --help)"
		}
	} else if e, ok := api.AsError(err); ok {
		msg = e.Code + ": " + dropRepeatedCode(e.Message, e.Code)
	} else if we := new(*wire.Error); errors.As(err, we) {
		msg = wireErrorMessage(err, *we)
	} else {
		msg = api.CodeInternal + ": " + err.Error()
	}
	return "meshctl: " + withSpaceHint(strings.Join(strings.Fields(msg), " "))
}

// dropRepeatedCode drops from msg a leading "<code>: " or "<origin>:
// <code in words>: " (the API's "locationd: conflict: ..."), which would
// repeat the code errorLine already prints first.
func dropRepeatedCode(msg, code string) string {
	if rest, ok := strings.CutPrefix(msg, code+": "); ok && rest != "" {
		return rest
	}
	origin, rest, ok := strings.Cut(msg, ": ")
	if !ok || strings.Contains(origin, " ") {
		return msg
	}
	if r, ok := strings.CutPrefix(rest, strings.ReplaceAll(code, "_", " ")+": "); ok && r != "" {
		return r
	}
	return msg
}

func newRoot(stdout io.Writer, lookup func(string) (string, bool)) *cobra.Command {
	root, _ := newTracedRoot(stdout, lookup)
	return root
}

// newTracedRoot is newRoot and the trace of the command it runs (-v).
func newTracedRoot(stdout io.Writer, lookup func(string) (string, bool)) (*cobra.Command, *cmdTrace) {
	g := &globals{lookup: lookup}
	root := &cobra.Command{
		Use:   "meshctl",
		Short: "inspect a meshloc cluster through locationd, and call its objects",
		Long: `meshctl inspects a meshloc cluster through locationd's API (owners,
objects, get, relocations, controllers), operates it (relocate, rebalance),
and calls objects through a meshnode gateway (call, session).

Global flags can also be set by the environment: MESHCTL_<FLAG>, e.g.
MESHCTL_LOCATIOND=http://10.0.0.5:7070; a flag given wins. A secured cluster
(mutual TLS) is reached with --cacert, --cert and --key (MESHCTL_CACERT,
MESHCTL_CERT, MESHCTL_KEY) and https:// --locationd; meshctl certs init makes
the certificates.

Exit status: 0 on success, 1 on an error, 2 on a usage error. Errors are one
line on stderr: "meshctl: <code>: <message>". Object names (actor/<type>/<id>,
group/<id>), owner ids, --node (host:port) and --locationd (an http or https
URL) are checked before any request: one that does not parse is a usage error,
"meshctl: invalid_argument: ...", and nothing is sent.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{err: fmt.Errorf("unknown command %q", args[0])}
			}
			return nil
		},
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := cliutil.ApplyEnv(cmd.Root().PersistentFlags(), envPrefix, g.lookup); err != nil {
				return usageError{err: err}
			}
			if g.output != "table" && g.output != "json" {
				return usageError{err: fmt.Errorf("-o %q (want table or json)", g.output)}
			}
			if g.timeout <= 0 {
				return usageError{err: fmt.Errorf("--timeout %s must be positive", g.timeout)}
			}
			// The addresses, before any request: a bad one would fail
			// only at the request's deadline.
			if err := checkHTTPURL("--locationd", g.locationd); err != nil {
				return err
			}
			if err := g.tls.Validate(); err != nil {
				return usageError{err: fmt.Errorf("--cacert/--cert/--key: %w", err)}
			}
			return checkHostPort("--node", g.node)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError{err: errors.New("a subcommand is required")}
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.locationd, "locationd", "http://127.0.0.1:7070", "URL of locationd's API")
	pf.StringVar(&g.node, "node", "127.0.0.1:7100", "gRPC address of a meshnode gateway (for call)")
	pf.Var(cliutil.NewList(&g.etcdEndpoints), "etcd-endpoints", "comma-separated etcd client URLs: call routes from etcd straight to the owner instead of through --node")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table or json (the API's JSON)")
	pf.DurationVar(&g.timeout, "timeout", 10*time.Second, "bound on each request")
	pf.StringVar(&g.tls.CA, "cacert", "", "the cluster CA: with --cert and --key, locationd (https://) and nodes are reached with mutual TLS")
	pf.StringVar(&g.tls.Cert, "cert", "", "your certificate (admin, operator or viewer of meshctl certs init)")
	pf.StringVar(&g.tls.Key, "key", "", "the key of --cert")
	pf.StringVar(&g.etcd.CACert, "etcd-cacert", "", "CA of etcd's server certificate (call --etcd-endpoints https://...)")
	pf.StringVar(&g.etcd.Cert, "etcd-cert", "", "client certificate for etcd (its common name is the etcd user)")
	pf.StringVar(&g.etcd.Key, "etcd-key", "", "the key of --etcd-cert")
	pf.StringVar(&g.etcd.User, "etcd-user", "", "etcd user (password authentication; with --etcd-password-file)")
	pf.StringVar(&g.etcd.PasswordFile, "etcd-password-file", "", "file holding --etcd-user's password")
	root.SetOut(stdout)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err: err} })

	root.AddCommand(ownersCmd(g, stdout), objectsCmd(g, stdout), getCmd(g, stdout), callCmd(g, stdout), sessionCmd(g, stdout), relocateCmd(g, stdout), deleteCmd(g, stdout), relocationsCmd(g, stdout), eventsCmd(g, stdout), drainCmd(g, stdout), verifyCmd(g, stdout),
		controllersCmd(g, stdout), etcdCmd(g, stdout), rebalanceCmd(g, stdout), groupCmd(g, stdout), benchCmd(g, stdout), probeCmd(g, stdout), certsCmd(g, stdout))
	for _, c := range root.Commands() {
		c.SilenceErrors, c.SilenceUsage = true, true
	}
	cliutil.SetVersion(root)
	tr := &cmdTrace{}
	tr.attach(root)
	return root, tr
}

// exactArgs is cobra.ExactArgs as a usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usageError{err: fmt.Errorf("%s: %w", cmd.CommandPath(), err)}
		}
		return nil
	}
}

// client is the API client of --locationd (checked by the root's
// PersistentPreRunE).
func (g *globals) client() (*client.Admin, error) {
	hc, err := g.httpClient()
	if err != nil {
		return nil, err
	}
	c, err := client.NewAdmin(g.locationd, hc)
	if err != nil {
		return nil, badArgument("--locationd", err)
	}
	return c, nil
}

// printJSON writes the API's JSON, indented.
func printJSON(w io.Writer, raw []byte) error {
	var b bytes.Buffer
	if err := json.Indent(&b, bytes.TrimSpace(raw), "", "  "); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}

// table writes rows aligned in columns; the first row is the header.
func table(w io.Writer, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func ownersCmd(g *globals, out io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "owners",
		Short: "list the live owners (meshnodes)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			r, raw, err := c.Owners(ctx)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(out, raw)
			}
			rows := [][]string{{"ID", "GENERATION", "STATE", "ADDRESS", "WEIGHT", "VERSION", "TYPES", "STARTED", "LEASE", "ROUTING-ID"}}
			for _, o := range r.Owners {
				rows = append(rows, []string{
					o.ID, fmt.Sprint(o.Generation), dash(o.State), dash(o.Address), fmt.Sprint(o.Weight),
					dash(o.ApplicationVersion), dash(strings.Join(o.Types, ",")), dash(o.Started), dash(o.LeaseID), dash(o.RoutingID),
				})
			}
			return table(out, rows)
		},
	}
}

func objectsCmd(g *globals, out io.Writer) *cobra.Command {
	var q api.ObjectsQuery
	var orphaned bool
	cmd := &cobra.Command{
		Use:   "objects",
		Short: "list objects and their owners",
		Long: `List authority records. --orphaned keeps the objects whose owner is gone
(owner key absent, or of another generation); --orphaned=false keeps the others.

OWNER is the owner pair id@generation: the generation after @ is the owner's,
the node's life (it grows at each restart of that node). AUTHORITY-GEN is the
object's authority generation: it grows by one at every change of the
object's owner (a relocation, a recovery, a sleep, a wake); in the JSON
record it is "ownerGeneration". OBJECT-GEN grows when the object is
re-created. A sleeping object (STATE sleeping) has no owner: OWNER and
ALIVE are "-", and its next call wakes it; it is never orphaned.

--contains keeps the objects whose name contains a text (locationd filters).
--limit N lists one page of at most N objects; when more follow, a last line
says so and names the --after of the next page.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("orphaned") {
				q.Orphaned = &orphaned
			}
			if q.Kind != "" && q.Kind != keyspace.KindActor && q.Kind != keyspace.KindGroup {
				return badArgument("--kind", fmt.Errorf("%q (want actor or group)", q.Kind))
			}
			if q.Owner != "" {
				if err := checkOwnerID("--owner", q.Owner); err != nil {
					return err
				}
			}
			switch {
			case cmd.Flags().Changed("contains") && (q.Contains == "" || len(q.Contains) > api.MaxContains):
				return badArgument("--contains", fmt.Errorf("%q: 1 to %d bytes", q.Contains, api.MaxContains))
			case q.Limit < 0 || q.Limit > api.MaxObjectsLimit:
				return badArgument("--limit", fmt.Errorf("%d (want 1..%d, 0: all)", q.Limit, api.MaxObjectsLimit))
			case q.After != "" && q.Limit == 0:
				return badArgument("--after", errors.New("pages a listing: give --limit too"))
			case q.After != "":
				if _, err := parseObject("--after", q.After); err != nil {
					return err
				}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			r, raw, err := c.Objects(ctx, q)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(out, raw)
			}
			rows := [][]string{{"OBJECT", "OWNER", "ALIVE", "STATE", "OBJECT-GEN", "AUTHORITY-GEN", "STORE-VERSION", "ADDRESS"}}
			for _, o := range r.Objects {
				rows = append(rows, []string{
					o.Object, ownerText(o.Record), aliveText(o.Record, o.OwnerAlive), string(o.Record.State),
					fmt.Sprint(o.Record.ObjectGeneration), fmt.Sprint(o.Record.AuthorityGeneration),
					fmt.Sprint(o.StoreVersion), dash(o.Record.Node.Address),
				})
			}
			if err := table(out, rows); err != nil {
				return err
			}
			if r.Next != "" {
				fmt.Fprintf(out, "more objects follow: the next page is --after %s\n", r.Next)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&q.Kind, "kind", "", "only objects of this kind: actor or group")
	cmd.Flags().StringVar(&q.Owner, "owner", "", "only objects owned by this owner id")
	cmd.Flags().StringVar(&q.Contains, "contains", "", "only objects whose name contains this")
	cmd.Flags().IntVar(&q.Limit, "limit", 0, "list one page of at most this many objects (0: all)")
	cmd.Flags().StringVar(&q.After, "after", "", "with --limit: the page after this object (a last line names it)")
	cmd.Flags().BoolVar(&orphaned, "orphaned", false, "only objects whose owner is gone (--orphaned=false: only the others)")
	return cmd
}

// ownerText is a record's owner pair, "-" for a sleeping object's.
func ownerText(r record.Record) string {
	if r.Asleep() {
		return "-"
	}
	return r.Owner.String()
}

// aliveText is whether a record's owner is alive, "-" when it has none.
func aliveText(r record.Record, alive bool) string {
	if r.Asleep() {
		return "-"
	}
	return yesNo(alive)
}

func getCmd(g *globals, out io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "get OBJECT",
		Short: "show one object's authority record, e.g. get actor/counter/c1",
		Long: `Show one object's authority record. OWNER is id@generation, the owner's
generation (its node's life); AUTHORITY-GEN is the object's count of owner
changes (the record's "ownerGeneration" in -o json); see meshctl objects --help.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			obj, err := parseObject("OBJECT", args[0])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			r, raw, err := c.Object(ctx, obj.String())
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(out, raw)
			}
			rec := r.Record
			rows := [][]string{
				{"OBJECT", r.Object.Object},
				{"OWNER", ownerText(rec)},
				{"OWNER-ALIVE", aliveText(rec, r.OwnerAlive)},
				{"STATE", string(rec.State)},
				{"OBJECT-GEN", fmt.Sprint(rec.ObjectGeneration)},
				{"AUTHORITY-GEN", fmt.Sprint(rec.AuthorityGeneration)},
				{"STORE-VERSION", fmt.Sprint(r.StoreVersion)},
				{"REVISION", fmt.Sprint(r.Revision)},
				{"ADDRESS", dash(rec.Node.Address)},
				{"ROUTING-ID", dash(rec.Node.RoutingID)},
			}
			if rec.Intent != nil {
				rows = append(rows,
					[]string{"RELOCATION", rec.Intent.RelocationID},
					[]string{"RELOCATION-TARGET", rec.Intent.Target.String()},
					[]string{"RELOCATION-DEADLINE", time.UnixMilli(rec.Intent.DeadlineMs).UTC().Format(time.RFC3339)},
				)
			}
			if rec.Group != "" {
				rows = append(rows, []string{"GROUP", rec.Group})
			}
			if len(rec.Members) > 0 {
				rows = append(rows, []string{"MEMBERS", strings.Join(rec.Members, ",")})
			}
			if rec.Pinned {
				rows = append(rows, []string{"PINNED", "yes"})
			}
			if rec.LastRelocation != "" {
				rows = append(rows, []string{"LAST-RELOCATION", rec.LastRelocation})
			}
			return table(out, rows)
		},
	}
}
