package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshloc/meshloc/pkg/api"
)

// drainWaitSlack is how much longer than the drain's bound meshctl waits for
// the report (relocations in flight at the deadline end by their own).
const drainWaitSlack = 2 * time.Minute

func drainCmd(g *globals, out io.Writer) *cobra.Command {
	var req api.DrainRequest
	var timeout time.Duration
	var keepRunning bool
	cmd := &cobra.Command{
		Use:   "drain OWNER",
		Short: "move every object off a node, then stop it, e.g. drain n1",
		Long: `Drain a node through locationd (POST /v1/owners/OWNER/drain): the node
refuses new relocations and activations, finishes or aborts the relocations
it is the target of, moves every object it hosts to other nodes (in bulk
moves of up to 128 objects to one target each, --concurrency objects at a
time, 0 for its --drain-concurrency; a move that did not land is tried again
elsewhere), then stops: its lease is revoked last and its process exits 0.
--keep-running leaves it running, draining (it takes nothing new until it is
restarted). The drain goes on while it moves objects; --timeout is how long
it may go without moving one (0: the node's --drain-timeout, 60s by default),
at most an hour in all. Objects not moved when it ends are reported, and
lost when the node stops (their next call re-creates them, answered
state_lost). SIGTERM to a meshnode drains it the same way.

Prints progress as it happens, at most a few lines a second:
  draining n1@4: 100000 objects
  moved 41023, failed 0, left 58977
  failed actor/blob/b1 (attempts 3): unavailable: ...   (the first 100)
then the report: drained n1@4 in 7.1s: moved 99999, failed 1 (782 bulk
moves, 100000 relocations); stopping — and the objects not moved (the first
100; --list lists every object moved and not moved). Exit status 1 if any
object could not be moved (or the drain did not end), 0 otherwise. With
-o json, the API's lines (one JSON object each) as they come.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 || timeout > api.MaxDrainTimeoutMs*time.Millisecond {
				return usageError{err: fmt.Errorf("--timeout %s must be between 0 (the node's --drain-timeout) and %s", timeout, api.MaxDrainTimeoutMs*time.Millisecond)}
			}
			if timeout > 0 && timeout < time.Millisecond {
				return usageError{err: fmt.Errorf("--timeout %s is under a millisecond", timeout)}
			}
			if req.Concurrency < 0 || req.Concurrency > api.MaxDrainConcurrency {
				return usageError{err: fmt.Errorf("--concurrency %d must be between 0 (the node's --drain-concurrency) and %d", req.Concurrency, api.MaxDrainConcurrency)}
			}
			if err := checkOwnerID("OWNER", args[0]); err != nil {
				return err
			}
			req.TimeoutMs = timeout.Milliseconds()
			if keepRunning {
				req.StopAfter = new(false)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			// The drain's deadline follows its progress: it may run as
			// long as the longest drain a node runs.
			ctx, cancel := context.WithTimeout(cmd.Context(), api.MaxDrainTimeoutMs*time.Millisecond+drainWaitSlack)
			defer cancel()
			owner := args[0]
			rep, err := c.Drain(ctx, owner, req, func(ev api.DrainEvent, raw []byte) {
				if g.output == "json" {
					fmt.Fprintf(out, "%s\n", raw)
					return
				}
				if line := drainLine(owner, ev); line != "" {
					fmt.Fprintln(out, line)
				}
			})
			if err != nil {
				return err
			}
			if g.output != "json" {
				fmt.Fprintln(out, drainSummary(rep))
				if req.List {
					for _, m := range rep.Moved {
						fmt.Fprintf(out, "  moved: %s -> %s in %s\n", m.Object, m.Target, interruption(m.InterruptionMicros, "0s"))
					}
				}
				for _, f := range rep.Failed {
					fmt.Fprintf(out, "  not moved: %s: %s: %s\n", f.Object, dash(f.Code), dash(f.Reason))
				}
				if more := rep.FailedCount - len(rep.Failed); more > 0 {
					fmt.Fprintf(out, "  and %d more not moved (meshctl drain --list lists them all)\n", more)
				}
			}
			if rep.FailedCount > 0 {
				first := rep.Failed[0]
				return &api.Error{Code: "drain_incomplete", Message: fmt.Sprintf("drain of %s: %d of %d objects not moved (%s: %s)",
					rep.Owner, rep.FailedCount, rep.FailedCount+rep.MovedCount, first.Object, first.Reason)}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&req.Concurrency, "concurrency", 0, "objects moved at a time (0: the node's --drain-concurrency)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "how long the drain may go without moving an object (0: the node's --drain-timeout)")
	cmd.Flags().BoolVar(&req.List, "list", false, "after the report, list every object moved and not moved")
	cmd.Flags().BoolVar(&keepRunning, "keep-running", false, "leave the node running (draining) instead of stopping it")
	return cmd
}

// drainLine is the progress line of one event ("" for none).
func drainLine(owner string, ev api.DrainEvent) string {
	switch ev.Kind {
	case api.DrainKindStarted:
		return fmt.Sprintf("draining %s: %d objects", owner, ev.Remaining)
	case api.DrainKindProgress:
		return fmt.Sprintf("moved %d, failed %d, left %d", ev.Moved, ev.Failed, ev.Remaining)
	case api.DrainKindFailed:
		return fmt.Sprintf("failed %s (attempts %d): %s: %s", ev.Object, ev.Attempt, dash(ev.Code), dash(ev.Message))
	case api.DrainKindReport, api.DrainKindError, api.DrainKindPage:
		return ""
	}
	return fmt.Sprintf("%s %s", ev.Kind, ev.Object)
}

// drainSummary is the report's line.
func drainSummary(r api.DrainReport) string {
	d := time.Duration(r.DurationMicros) * time.Microsecond
	switch {
	case d >= time.Second:
		d = d.Round(time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(10 * time.Microsecond)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "drained %s in %s: moved %d, failed %d (%d bulk moves, %d relocations)", r.Owner, d, r.MovedCount, r.FailedCount, r.Bulks, r.Relocations)
	if r.EndedEarly != "" {
		fmt.Fprintf(&b, "; ended early: %s", r.EndedEarly)
	}
	if r.Stopping {
		b.WriteString("; stopping")
	} else {
		b.WriteString("; still running (draining)")
	}
	return b.String()
}
