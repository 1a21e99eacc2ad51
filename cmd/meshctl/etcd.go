package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/etcdalarm"
	"github.com/meshloc/meshloc/internal/etcdauth"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// noSpaceHint ends an error line that names etcd's NOSPACE: what to do.
const noSpaceHint = " (etcd is out of space: " + etcdalarm.NoSpaceHint + "; meshctl etcd shows its sizes)"

// withSpaceHint appends noSpaceHint to msg when msg is about etcd's
// NOSPACE and does not say what to do already.
func withSpaceHint(msg string) string {
	if !strings.Contains(msg, "NOSPACE") && !strings.Contains(msg, "database space exceeded") || strings.Contains(msg, "alarm disarm") {
		return msg
	}
	return msg + noSpaceHint
}

func etcdCmd(g *globals, out io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "show the etcd locationd uses: its sizes, alarms and compaction",
		Long: `Show the etcd locationd uses (GET /v1/etcd): one row per endpoint with its
file's size (DB SIZE), the part in use (IN USE) and the quota (QUOTA: etcd
raises its NOSPACE alarm and refuses every write when the file reaches it),
then etcd's alarms, and what keeps its history short: COMPACTED (the
revision etcd last compacted at), HISTORY (revisions kept since), AUTO (on:
the embedded etcd's own compaction, or an external etcd whose compacted
revision moves; off: nothing compacts it; unknown: not watched long enough).
Under an alarm it says what to do (docs/operating/etcd.md).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			return showEtcd(ctx, c, g.output, out)
		},
	}
	cmd.AddCommand(etcdAddNodesCmd(g, out))
	return cmd
}

func etcdAddNodesCmd(g *globals, out io.Writer) *cobra.Command {
	prefix, cluster := keyspace.DefaultPrefix, keyspace.DefaultCluster
	cmd := &cobra.Command{
		Use:   "add-nodes NAME... --etcd-endpoints URL --etcd-cert etcd-root.crt --etcd-key etcd-root.key",
		Short: "give new nodes their own etcd user (run with etcd's root credentials)",
		Long: `add-nodes gives each named node its etcd user, meshloc-node-<name>: it reads
the cluster's keys, writes records, intents, the catalog and durable state,
and writes its own owner key and no other (a node cannot register as,
rewrite or revoke another node). The node connects with the certificate
etcd-node-<name>.crt (meshctl certs init or certs add make it). Only etcd's
root may add users: give root's client certificate. Nodes named at the
cluster's start get theirs from locationd --etcd-node-users. A user that
exists has its roles granted again; a bad name changes nothing.`,
		Example: `  meshctl etcd add-nodes n4 --etcd-endpoints https://127.0.0.1:2379 --etcd-cacert certs/ca.crt \
    --etcd-cert certs/etcd-root.crt --etcd-key certs/etcd-root.key`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, names []string) error {
			for _, n := range names {
				if err := keyspace.ValidateOwnerID(n); err != nil {
					return badArgument("NAME", err)
				}
			}
			keys, err := keyspace.New(prefix, cluster)
			if err != nil {
				return usageError{err: err}
			}
			if len(g.etcdEndpoints) == 0 {
				return usageError{err: errors.New("etcd add-nodes: --etcd-endpoints is required")}
			}
			e := g.etcd
			e.Endpoints = g.etcdEndpoints
			cfg, err := e.ClientConfig()
			if err != nil {
				return usageError{err: err}
			}
			c, err := clientv3.New(cfg)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			if err := etcdauth.AddNodes(ctx, c, keys, names); err != nil {
				return err
			}
			for _, n := range names {
				fmt.Fprintln(out, etcdauth.NodeUser(n))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", prefix, "etcd key prefix (locationd --prefix)")
	cmd.Flags().StringVar(&cluster, "cluster", cluster, "cluster name (locationd --cluster)")
	return cmd
}

func showEtcd(ctx context.Context, c *client.Admin, output string, out io.Writer) error {
	r, raw, err := c.Etcd(ctx)
	if err != nil {
		return err
	}
	if output == "json" {
		return printJSON(out, raw)
	}
	rows := [][]string{{"ENDPOINT", "MEMBER", "LEADER", "REVISION", "DB SIZE", "IN USE", "QUOTA", "ERRORS"}}
	for _, m := range r.Members {
		if m.Error != "" {
			rows = append(rows, []string{m.Endpoint, "-", "-", "-", "-", "-", "-", m.Error})
			continue
		}
		rows = append(rows, []string{m.Endpoint, m.ID, yesNo(m.Leader), fmt.Sprint(m.Revision), mib(m.DBSize), mib(m.DBSizeInUse), mib(m.QuotaBytes), dash(strings.Join(m.Errors, "; "))})
	}
	if err := table(out, rows); err != nil {
		return err
	}
	cp := r.Compaction
	fmt.Fprintf(out, "compaction: auto %s, compacted at %d, %d revisions kept", cp.Auto, cp.CompactedRevision, cp.History)
	if r.Embedded {
		fmt.Fprintf(out, " (embedded: retention %s, defrag %s; %d compactions, %d near the quota, %d defragmentations)",
			cp.Retention, yesNo(cp.Defrag), cp.Compactions, cp.PressureCompactions, cp.Defrags)
	}
	fmt.Fprintln(out)
	if len(r.Alarms) == 0 {
		fmt.Fprintln(out, "alarms: none")
		return nil
	}
	for _, a := range r.Alarms {
		fmt.Fprintf(out, "ALARM %s on member %s\n", a.Type, a.Member)
	}
	if r.Hint != "" {
		fmt.Fprintln(out, r.Hint)
	}
	return nil
}

// mib is n bytes in MiB, one decimal.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
