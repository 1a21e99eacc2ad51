package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshloc/meshloc/internal/cliutil"
	"github.com/meshloc/meshloc/pkg/mtls"
)

func certsCmd(g *globals, out io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "make the certificates of a secured cluster (mutual TLS)",
		Args:  exactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			return usageError{err: errors.New("certs: a subcommand is required (init, add, revoke)")}
		},
	}
	cmd.AddCommand(certsInitCmd(out), certsAddCmd(out), certsRevokeCmd(out))
	return cmd
}

// certFlags are the flags init and add share: what to issue, and where.
type certFlags struct {
	dir                       string
	nodes, locs, etcds, hosts []string
	admins, operators, viewer []string
	valid                     time.Duration
	p12File                   string
}

func (f *certFlags) register(cmd *cobra.Command, clients bool) {
	cmd.Flags().StringVar(&f.dir, "dir", "", "directory of the files (created if missing; default $XDG_CONFIG_HOME/meshloc/certs, i.e. ~/.config/meshloc/certs: outside any working tree)")
	cmd.Flags().Var(cliutil.NewList(&f.nodes), "nodes", "comma-separated node names (owner ids); each also gets its etcd user's certificate, etcd-node-<name>")
	cmd.Flags().Var(cliutil.NewList(&f.locs), "locationd", "comma-separated locationd names")
	cmd.Flags().Var(cliutil.NewList(&f.etcds), "etcd", "comma-separated member names of an external etcd cluster: a server certificate each")
	cmd.Flags().Var(cliutil.NewList(&f.hosts), "hosts", "comma-separated DNS names and addresses every server certificate is valid for (default localhost,127.0.0.1)")
	cmd.Flags().DurationVar(&f.valid, "valid-for", 365*24*time.Hour, "how long the certificates are valid")
	cmd.Flags().StringVar(&f.p12File, "p12-password-file", "", "also write <name>.p12 (PKCS#12: certificate, key and CA, for a browser) for every client certificate, encrypted with the password this file holds")
	if clients {
		cmd.Flags().Var(cliutil.NewList(&f.admins), "admin", "comma-separated names of new admin client certificates")
		cmd.Flags().Var(cliutil.NewList(&f.operators), "operator", "comma-separated names of new operator client certificates")
		cmd.Flags().Var(cliutil.NewList(&f.viewer), "viewer", "comma-separated names of new viewer client certificates")
	}
}

// options checks the flags and makes the issuing options; the directory
// defaults to defaultCertsDir.
func (f *certFlags) options() (mtls.InitOptions, error) {
	if f.dir == "" {
		f.dir = defaultCertsDir()
	}
	o := mtls.InitOptions{Nodes: f.nodes, Locationd: f.locs, Etcd: f.etcds, Hosts: f.hosts, ValidFor: f.valid}
	for flag, names := range map[string][]string{"--nodes": f.nodes, "--locationd": f.locs} {
		role := map[string]mtls.Role{"--nodes": mtls.RoleNode, "--locationd": mtls.RoleLocationd}[flag]
		for _, n := range names {
			if err := (mtls.Identity{Role: role, Name: n}).Valid(); err != nil {
				return o, badArgument(flag, err)
			}
		}
	}
	for role, names := range map[mtls.Role][]string{mtls.RoleAdmin: f.admins, mtls.RoleOperator: f.operators, mtls.RoleViewer: f.viewer} {
		for _, n := range names {
			id := mtls.Identity{Role: role, Name: n}
			if err := id.Valid(); err != nil {
				return o, badArgument("--"+string(role), err)
			}
			o.Clients = append(o.Clients, id)
		}
	}
	if f.p12File != "" {
		b, err := os.ReadFile(f.p12File)
		if err != nil {
			return o, badArgument("--p12-password-file", err)
		}
		if o.P12Password = strings.TrimRight(string(b), "\r\n"); o.P12Password == "" {
			return o, badArgument("--p12-password-file", errors.New("the file holds no password"))
		}
	}
	return o, nil
}

// defaultCertsDir is where certificates go unless --dir says otherwise:
// the user's configuration directory, never the working tree a CA key
// could be committed from.
func defaultCertsDir() string {
	d, err := os.UserConfigDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "meshloc-certs")
	}
	return filepath.Join(d, "meshloc", "certs")
}

// written prints the files written and the reminder about ca.key.
func written(out io.Writer, what, dir string, names []string, err error) error {
	if errors.Is(err, mtls.ErrExists) {
		return usageError{err: fmt.Errorf("certs %s: %w (nothing written)", what, err)}
	}
	if err != nil {
		return err
	}
	for _, n := range names {
		fmt.Fprintln(out, filepath.Join(dir, n))
	}
	if slices.Contains(names, "ca.key") {
		fmt.Fprintln(out, "# ca.key (mode 0600) signs new certificates and revocation lists: keep it offline, away from every cluster machine")
	}
	return nil
}

func certsInitCmd(out io.Writer) *cobra.Command {
	var f certFlags
	cmd := &cobra.Command{
		Use:   "init [--dir DIR] [--nodes n1,n2,n3] [--locationd l1,l2] [--etcd e1,e2,e3] [--hosts ...] [--p12-password-file FILE]",
		Short: "make a cluster CA and every certificate of a cluster in DIR",
		Long: `certs init makes a new cluster CA (ca.crt, ca.key) and, signed by it, ECDSA
P-256 certificates with their keys (<name>.crt, <name>.key):

  <node>.crt       one per --nodes name: role node, common name = the owner id (meshnode --name)
  <locationd>.crt  one per --locationd name: role locationd (its API and its embedded etcd)
  <etcd>.crt       one per --etcd name: the server certificate of an external etcd member
  admin.crt        role admin: everything
  operator.crt     role operator: reads, calls, relocate, drain, rebalance, groups
  viewer.crt       role viewer: reads and calls only
  etcd-node-<node>.crt  one per --nodes name: that node's own etcd user (meshloc-node-<node>:
                   it may write its own owner key and no other)
  etcd-root.crt, etcd-locationd.crt, etcd-watch.crt
                   etcd client certificates (common name = the etcd user: root,
                   meshloc-locationd, meshloc-watch: read-only,
                   for locationd watch-proxy) for etcd's certificate
                   authentication

Every node and locationd certificate is also valid for --hosts (DNS names or
addresses), for tools that check host names (etcdctl, curl, grpcurl). It
refuses to overwrite: if any of those files exists in DIR, nothing is written.
DIR defaults to $XDG_CONFIG_HOME/meshloc/certs (~/.config/meshloc/certs), out
of any working tree; every key is written 0600. --p12-password-file also
writes admin.p12, operator.p12 and viewer.p12 for a browser (the dashboard).
Keep ca.key offline once done: it signs new certificates (certs add) and
revocation lists (certs revoke).`,
		Example: `  meshctl certs init --dir certs --nodes n1,n2,n3 --locationd l1
  meshctl certs init --dir certs --nodes meshnode1,meshnode2 --locationd locationd1 --hosts localhost,127.0.0.1,meshnode1,meshnode2`,
		Args: exactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			o, err := f.options()
			if err != nil {
				return err
			}
			names, err := mtls.Init(f.dir, o)
			return written(out, "init", f.dir, names, err)
		},
	}
	f.register(cmd, false)
	return cmd
}
