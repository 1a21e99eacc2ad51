package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshloc/meshloc/pkg/api"
)

func rebalanceCmd(g *globals, out io.Writer) *cobra.Command {
	var dryRun, colocate bool
	var budget int
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "rebalance [--dry-run] [--colocate] [--budget N]",
		Short: "spread objects over the live nodes (--dry-run: print the plan only)",
		Long: `Plan relocations that spread the objects over the live nodes, and run them
(POST /v1/rebalance), or with --dry-run only print the plan (GET
/v1/rebalance/plan). Each move has a reason:

  drain     its owner is draining: everything it holds moves away
  weight    its owner has weight 0 (a pure gateway) yet holds objects
  load      its owner holds more than its weighted fair share by more than 10%
  colocate  (with --colocate) it joins the objects it messages most

Load is a count of objects (a group counts 1 + its members and moves as one,
never a member alone). Targets are serving nodes with weight > 0 that host
the object's type and run the source's application version. Pinned and
relocating objects never move. --budget bounds the moves of one run (default
32, at most 10000); when more were wanted the summary says so: run again.

--colocate adds a last step from the nodes' traffic sketches (the messages
objects send each other): while the budget lasts, the object whose move
takes the most messages off the network moves to the node of the objects it
messages, keeping every node within 10% of its fair share. The plan then
shows the cross-node fraction of the traffic before and after.

Prints one line per move (OBJECT, FROM -> TO, REASON), then the load of
every owner before and after. When run, each move's OUTCOME (completed,
aborted, failed, shutdown, skipped: it changed since the plan, error) and a
summary line. Exit status 1 if any move did not complete (skipped moves are
not failures).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if budget < 0 || budget > api.MaxRebalanceBudget {
				return usageError{err: fmt.Errorf("--budget %d (want 1..%d; 0: %d)", budget, api.MaxRebalanceBudget, api.DefaultRebalanceBudget)}
			}
			if wait <= 0 {
				return usageError{err: fmt.Errorf("--wait %s must be positive", wait)}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			var p api.RebalancePlan
			var raw []byte
			if dryRun {
				ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
				defer cancel()
				if colocate {
					p, raw, err = c.RebalancePlanColocate(ctx, budget)
				} else {
					p, raw, err = c.RebalancePlanOf(ctx, budget)
				}
			} else {
				ctx, cancel := context.WithTimeout(cmd.Context(), wait)
				defer cancel()
				p, raw, err = c.Rebalance(ctx, api.RebalanceRequest{Budget: budget, Colocate: colocate})
			}
			if err != nil {
				return err
			}
			if g.output == "json" {
				if err := printJSON(out, raw); err != nil {
					return err
				}
			} else if err := printPlan(out, p); err != nil {
				return err
			}
			if !p.DryRun && p.Failed > 0 {
				return &api.Error{Code: "failed", Message: fmt.Sprintf("rebalance: %d of %d moves did not complete", p.Failed, len(p.Moves))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan, move nothing")
	cmd.Flags().BoolVar(&colocate, "colocate", false, "also move objects next to the objects they message most (the nodes' traffic)")
	cmd.Flags().IntVar(&budget, "budget", 0, fmt.Sprintf("most moves of this run (0: %d)", api.DefaultRebalanceBudget))
	cmd.Flags().DurationVar(&wait, "wait", 10*time.Minute, "bound on the wait for the moves to end (they go on if meshctl stops waiting)")
	return cmd
}

func printPlan(out io.Writer, p api.RebalancePlan) error {
	rows := [][]string{{"OBJECT", "FROM", "", "TO", "REASON"}}
	if !p.DryRun {
		rows[0] = append(rows[0], "OUTCOME", "INTERRUPTION", "MESSAGE")
	}
	for _, m := range p.Moves {
		row := []string{m.Object, m.From, "->", m.To, m.Reason}
		if !p.DryRun {
			row = append(row, dash(m.Outcome), interruption(m.InterruptionMicros, "-"), dash(m.Message))
		}
		rows = append(rows, row)
	}
	if len(p.Moves) > 0 {
		if err := table(out, rows); err != nil {
			return err
		}
		fmt.Fprintln(out)
	}
	loads := [][]string{{"OWNER", "STATE", "WEIGHT", "BEFORE", "AFTER", "FAIR"}}
	for _, o := range p.Owners {
		loads = append(loads, []string{o.ID, dash(o.State), fmt.Sprint(o.Weight), fmt.Sprint(o.Before), fmt.Sprint(o.After), fmt.Sprintf("%.1f", o.Fair)})
	}
	if err := table(out, loads); err != nil {
		return err
	}
	for _, s := range p.Stuck {
		fmt.Fprintf(out, "stuck: %s stays on %s (%s): %s\n", s.Object, s.Owner, s.Reason, s.Why)
	}
	if t := p.Traffic; t != nil {
		fmt.Fprintf(out, "traffic: cross-node %.1f%% -> %.1f%% of %d messages between %d pairs of objects (sketches of %d nodes)\n",
			100*t.FractionBefore, 100*t.FractionAfter, t.Total, t.Edges, t.Nodes)
		if len(t.Unreachable) > 0 {
			fmt.Fprintf(out, "traffic: no sketch from %v\n", t.Unreachable)
		}
	}
	summary := fmt.Sprintf("plan: %d moves (budget %d, revision %d)", len(p.Moves), p.Budget, p.Revision)
	if !p.DryRun {
		summary = fmt.Sprintf("rebalance: %d moves: %d completed, %d skipped, %d failed", len(p.Moves), p.Completed, p.Skipped, p.Failed)
	}
	if len(p.Moves) == 0 {
		summary = "balanced: nothing to move"
	}
	if p.BudgetExhausted {
		summary += "; more moves were wanted than the budget allows: run again"
	}
	_, err := fmt.Fprintln(out, summary)
	return err
}
