package main

import (
	"errors"
	"fmt"
	"io"
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
			return usageError{err: errors.New("certs: a subcommand is required (init)")}
		},
	}
	cmd.AddCommand(certsInitCmd(out))
	return cmd
}

func certsInitCmd(out io.Writer) *cobra.Command {
	var dir string
	var nodes, locs, etcds, hosts []string
	var valid time.Duration
	cmd := &cobra.Command{
		Use:   "init --dir DIR [--nodes n1,n2,n3] [--locationd l1,l2] [--etcd e1,e2,e3] [--hosts ...]",
		Short: "make a cluster CA and every certificate of a cluster in DIR",
		Long: `certs init makes a new cluster CA (ca.crt, ca.key) and, signed by it, ECDSA
P-256 certificates with their keys (<name>.crt, <name>.key):

  <node>.crt       one per --nodes name: role node, common name = the owner id (meshnode --name)
  <locationd>.crt  one per --locationd name: role locationd (its API and its embedded etcd)
  <etcd>.crt       one per --etcd name: the server certificate of an external etcd member
  admin.crt        role admin: everything
  operator.crt     role operator: reads, calls, relocate, drain, rebalance, groups
  viewer.crt       role viewer: reads and calls only
  etcd-root.crt, etcd-node.crt, etcd-locationd.crt
                   etcd client certificates (common name = the etcd user: root,
                   meshloc-node, meshloc-locationd) for etcd's certificate
                   authentication

Every node and locationd certificate is also valid for --hosts (DNS names or
addresses), for tools that check host names (etcdctl, curl, grpcurl). It
refuses to overwrite: if any of those files exists in DIR, nothing is written.
Keep ca.key offline once done; it signs new certificates.`,
		Example: `  meshctl certs init --dir certs --nodes n1,n2,n3 --locationd l1
  meshctl certs init --dir certs --nodes meshnode1,meshnode2 --locationd locationd1 --hosts localhost,127.0.0.1,meshnode1,meshnode2`,
		Args: exactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			if dir == "" {
				return usageError{err: errors.New("certs init: --dir is required")}
			}
			for _, n := range nodes {
				if err := (mtls.Identity{Role: mtls.RoleNode, Name: n}).Valid(); err != nil {
					return badArgument("--nodes", err)
				}
			}
			names, err := mtls.Init(dir, mtls.InitOptions{Nodes: nodes, Locationd: locs, Etcd: etcds, Hosts: hosts, ValidFor: valid})
			if errors.Is(err, mtls.ErrExists) {
				return usageError{err: fmt.Errorf("certs init: %w (nothing written)", err)}
			}
			if err != nil {
				return err
			}
			for _, n := range names {
				fmt.Fprintln(out, n)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory to write the files into (created if missing)")
	cmd.Flags().Var(cliutil.NewList(&nodes), "nodes", "comma-separated node names (owner ids)")
	cmd.Flags().Var(cliutil.NewList(&locs), "locationd", "comma-separated locationd names")
	cmd.Flags().Var(cliutil.NewList(&etcds), "etcd", "comma-separated member names of an external etcd cluster: a server certificate each")
	cmd.Flags().Var(cliutil.NewList(&hosts), "hosts", "comma-separated DNS names and addresses every server certificate is valid for (default localhost,127.0.0.1)")
	cmd.Flags().DurationVar(&valid, "valid-for", 365*24*time.Hour, "how long the certificates are valid")
	return cmd
}
