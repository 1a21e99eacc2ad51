package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

func controllersCmd(g *globals, out io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "controllers",
		Short: "show who leads the recovery controller, and the orphans it sees",
		Long: `Show the controllers that run once per cluster under an etcd election among
every locationd (GET /v1/controllers): today the recovery controller, which
reports objects whose owner is gone and, with locationd --recover-orphans,
re-activates them on live nodes.

One row per controller: LEADER (the leading locationd, hostname/pid) and its
API address (HTTP), SINCE when it leads, ORPHANS (objects whose owner is gone,
as the leader last published it, at most every second), ASLEEP (sleeping
objects, whose records name no owner, published with ORPHANS), RECOVER (whether it
re-activates them), RECOVERED and FAILED (the leader process's recoveries
since it started), and THIS: whether the locationd asked (--locationd) leads or
follows. "none" means no locationd runs the controller.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			r, raw, err := c.Controllers(ctx)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(out, raw)
			}
			rows := [][]string{{"CONTROLLER", "LEADER", "HTTP", "SINCE", "ORPHANS", "ASLEEP", "RECOVER", "RECOVERED", "FAILED", "THIS"}}
			for _, ctl := range r.Controllers {
				this := "follower " + ctl.Self.ID
				if ctl.Self.Leader {
					this = "leader " + ctl.Self.ID
				}
				l := ctl.Leader
				if l == nil {
					rows = append(rows, []string{ctl.Name, "none", "-", "-", "-", "-", "-", "-", "-", this})
					continue
				}
				rows = append(rows, []string{
					ctl.Name, dash(l.ID), dash(l.HTTP), dash(l.Since), fmt.Sprint(l.Orphans), fmt.Sprint(l.Asleep), yesNo(l.RecoverOrphans),
					fmt.Sprint(l.Recovered), fmt.Sprint(l.Failed), this,
				})
			}
			return table(out, rows)
		},
	}
}
