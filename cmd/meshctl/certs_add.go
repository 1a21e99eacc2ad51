package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshloc/meshloc/pkg/mtls"
)

func certsAddCmd(out io.Writer) *cobra.Command {
	var f certFlags
	cmd := &cobra.Command{
		Use:   "add [--dir DIR] [--nodes n4] [--locationd l2] [--admin a] [--operator o] [--viewer v] [--p12-password-file FILE]",
		Short: "issue more certificates with an existing cluster CA",
		Long: `certs add issues new certificates with the CA of DIR (ca.crt and ca.key, as
certs init wrote them): a node joining the cluster (its certificate and its
etcd user's, etcd-node-<name>; give that user to etcd with meshctl etcd
add-nodes), a locationd member, an external etcd member, or a person's client
certificate of role admin, operator or viewer (--p12-password-file also
writes it as <name>.p12 for a browser). It refuses to overwrite: if any of
the files exists, nothing is written.`,
		Example: `  meshctl certs add --dir certs --nodes n4 --hosts localhost,127.0.0.1,n4.example
  meshctl certs add --dir certs --operator alice --p12-password-file alice.pass`,
		Args: exactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			o, err := f.options()
			if err != nil {
				return err
			}
			if len(o.Nodes)+len(o.Locationd)+len(o.Etcd)+len(o.Clients) == 0 {
				return usageError{err: errors.New("certs add: name something to issue (--nodes, --locationd, --etcd, --admin, --operator, --viewer)")}
			}
			names, err := mtls.Add(f.dir, o)
			return written(out, "add", f.dir, names, err)
		},
	}
	f.register(cmd, true)
	return cmd
}

func certsRevokeCmd(out io.Writer) *cobra.Command {
	var dir string
	var valid time.Duration
	cmd := &cobra.Command{
		Use:   "revoke [--dir DIR] NAME...",
		Short: "withdraw certificates: add them to the CA's revocation list",
		Long: `certs revoke adds the certificates DIR/NAME.crt to the cluster CA's revocation
list, DIR/ca.crl (created if missing; signed with DIR/ca.key; DER, as etcd
reads it). Copy ca.crl to every machine and give it to every process:
meshnode and locationd --crl-file (locationd's embedded etcd uses it too),
an external etcd --client-crl-file and --peer-crl-file. meshnode and
locationd read it again on SIGHUP; etcd reads it at each new connection.
A revoked certificate is then refused on every port: a lost machine's node
certificate, its etcd user's (etcd-node-<name>), a departed operator's. A
name without a certificate of this CA changes nothing. With no NAME it
writes the list again (an empty one at first, to start processes with).`,
		Example: `  meshctl certs revoke --dir certs n3 etcd-node-n3
  kill -HUP $(pidof meshnode locationd)`,
		RunE: func(_ *cobra.Command, names []string) error {
			if dir == "" {
				dir = defaultCertsDir()
			}
			sns, err := mtls.Revoke(dir, names, valid)
			if err != nil {
				return usageError{err: fmt.Errorf("certs revoke: %w (nothing written)", err)}
			}
			for _, sn := range sns {
				fmt.Fprintf(out, "revoked serial %s\n", sn)
			}
			fmt.Fprintln(out, filepath.Join(dir, mtls.CRLFile))
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory of ca.crt, ca.key and the certificates (default $XDG_CONFIG_HOME/meshloc/certs, i.e. ~/.config/meshloc/certs)")
	cmd.Flags().DurationVar(&valid, "valid-for", 365*24*time.Hour, "how long the list is valid (its next update)")
	return cmd
}
