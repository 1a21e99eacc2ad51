package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshloc/meshloc/pkg/api"
)

// now is the clock of the AGE column (tests set it).
var now = time.Now

// relocateWaitSlack is how much longer than the relocation's deadline meshctl
// waits for locationd's answer (locationd itself gives up 15 s after it).
const relocateWaitSlack = 30 * time.Second

func relocateCmd(g *globals, out io.Writer) *cobra.Command {
	var req api.RelocateRequest
	var timeout time.Duration
	var noWait bool
	cmd := &cobra.Command{
		Use:   "relocate OBJECT",
		Short: "move one object to another node, e.g. relocate actor/counter/c1 --to n2",
		Long: `Move one object to another node, through locationd (POST /v1/relocations),
and wait until the relocation ended. Without --to, the owner's placement chooses
a live serving node. --timeout is the relocation's deadline (0: locationd's
--relocation-timeout, 10s by default); meshctl waits for the outcome.

Prints one line: relocation <id> <object> <source> -> <target>: <outcome> in
<interruption> (and why, if it did not complete). Exit status 1 if the outcome
is not completed (aborted: the source kept the object; failed; shutdown).

A relocation is background work: while the owner's calls are slow, it
waits for the owner's pacing first, at most half its timeout (then
resource_exhausted, nothing done). --foreground starts it at once.

--no-wait prints the relocation's id as soon as it started (relocation <id>
<object> <source> -> <target>: started) and exits; follow it with
meshctl relocations --watch, or GET /v1/relocations/<id>.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 || timeout > api.MaxRelocationTimeoutMs*time.Millisecond {
				return usageError{err: fmt.Errorf("--timeout %s must be between 0 (locationd's default) and %s", timeout, api.MaxRelocationTimeoutMs*time.Millisecond)}
			}
			if timeout > 0 && timeout < time.Millisecond {
				return usageError{err: fmt.Errorf("--timeout %s is under a millisecond", timeout)}
			}
			obj, err := parseObject("OBJECT", args[0])
			if err != nil {
				return err
			}
			if req.Target != "" {
				if err := checkOwnerID("--to", req.Target); err != nil {
					return err
				}
			}
			req.Object = obj.String()
			req.TimeoutMs = timeout.Milliseconds()
			if noWait {
				no := false
				req.Wait = &no
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			wait := timeout
			if wait == 0 {
				wait = api.MaxRelocationTimeoutMs * time.Millisecond // locationd's default is not known here; it bounds the wait itself
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), wait+relocateWaitSlack)
			defer cancel()
			r, raw, err := c.Relocate(ctx, req)
			if err != nil {
				return err
			}
			if noWait {
				if g.output == "json" {
					return printJSON(out, raw)
				}
				fmt.Fprintf(out, "relocation %s %s %s -> %s: started\n", r.RelocationID, r.Object, dash(r.Source), dash(r.Target))
				return nil
			}
			if g.output == "json" {
				if err := printJSON(out, raw); err != nil {
					return err
				}
			} else {
				line := fmt.Sprintf("relocation %s %s %s -> %s: %s in %s", r.RelocationID, r.Object, dash(r.Source), dash(r.Target),
					dash(r.Outcome), interruption(r.InterruptionMicros, "0s"))
				if r.Outcome != api.OutcomeCompleted {
					line += ": " + dash(r.Code) + ": " + dash(r.Message)
				}
				fmt.Fprintln(out, line)
			}
			if r.Outcome != api.OutcomeCompleted {
				outcome := r.Outcome
				if outcome == "" {
					outcome = "unknown"
				}
				return &api.Error{Code: outcome, Message: fmt.Sprintf("relocation %s of %s did not complete: %s: %s", r.RelocationID, r.Object, dash(r.Code), dash(r.Message))}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Target, "to", "", "target owner id (default: the owner's placement chooses)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "the relocation's deadline (0: locationd's --relocation-timeout)")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "print the relocation's id as soon as its owner took it (a background one may wait for the owner's pacing first), and exit")
	cmd.Flags().BoolVar(&req.Foreground, "foreground", false, "the owner starts it at once, however slow its calls (otherwise it is background work, paced while the owner's calls are slow)")
	return cmd
}

func relocationsCmd(g *globals, out io.Writer) *cobra.Command {
	var q api.RelocationsQuery
	var inflight, watch bool
	var every, watchFor time.Duration
	cmd := &cobra.Command{
		Use:   "relocations",
		Short: "list in-flight and recent relocations of every live node",
		Long: `List the relocations every live node reports (GET /v1/relocations): in
flight first, then the ended ones, the most recently ended first. Each
relocation appears once per side (ROLE source and target). --object keeps one
object's; --inflight only those in flight (--inflight=false: only ended ones).

ID is the last 8 hex digits of the relocation id (its UUIDv7 starts with a
timestamp shared by every relocation of the same minute); -o json has the full
ids. A node that does not answer is named in a warning line after the table.

--watch follows them live instead, from locationd's event stream (GET
/v1/events): the relocations listed now, then one line when a relocation
side starts (with the phase it is in) and one when it ends (TIME ID OBJECT
ROLE SOURCE -> TARGET PHASE|OUTCOME), until Ctrl-C (or for --for). A stream
that breaks is opened again where it stopped; if events were missed, the
list is read again.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("inflight") {
				q.InFlight = &inflight
			}
			if q.Object != "" {
				if _, err := parseObject("--object", q.Object); err != nil {
					return err
				}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if watch {
				ctx, cancel, err := forFlag(cmd.Context(), watchFor)
				if err != nil {
					return err
				}
				defer cancel()
				return watchRelocations(ctx, c, q, g.timeout, out)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			r, raw, err := c.Relocations(ctx, q)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(out, raw)
			}
			rows := [][]string{{"ID", "OBJECT", "SOURCE", "TARGET", "ROLE", "PHASE", "OUTCOME", "INTERRUPTION", "AGE"}}
			t := now()
			for _, rel := range r.Relocations {
				outcome, since := rel.Outcome, rel.EndedUnixMs
				if rel.InFlight() {
					outcome, since = "in-flight", rel.StartedUnixMs
				}
				rows = append(rows, []string{
					shortID(rel.RelocationID), rel.Object, dash(rel.Source), dash(rel.Target), dash(rel.Role), dash(rel.Phase),
					outcome, interruption(rel.InterruptionMicros, "-"), age(t, since),
				})
			}
			if err := table(out, rows); err != nil {
				return err
			}
			for _, u := range r.Unreachable {
				fmt.Fprintf(out, "warning: node %s (%s) did not answer, its relocations are not listed: %s\n", u.ID, dash(u.Address), u.Error)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&q.Object, "object", "", "only the relocations of this object")
	cmd.Flags().BoolVar(&inflight, "inflight", false, "only relocations in flight (--inflight=false: only ended ones)")
	cmd.Flags().BoolVar(&watch, "watch", false, "follow them live: a line per change, until Ctrl-C")
	cmd.Flags().DurationVar(&every, "every", 500*time.Millisecond, "ignored: --watch follows the event stream")
	_ = cmd.Flags().MarkDeprecated("every", "--watch follows locationd's event stream, it does not ask again")
	cmd.Flags().DurationVar(&watchFor, "for", 0, "with --watch: stop after this long (0: at Ctrl-C)")
	return cmd
}

// shortID is the last 8 characters of a relocation id (its random part).
func shortID(id string) string {
	if len(id) <= 8 {
		return dash(id)
	}
	return id[len(id)-8:]
}

// interruption formats microseconds; zero is none.
func interruption(us int64, none string) string {
	if us <= 0 {
		return none
	}
	d := time.Duration(us) * time.Microsecond
	switch {
	case d >= time.Second:
		d = d.Round(time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(10 * time.Microsecond)
	}
	return d.String()
}

// age is how long ago unixMs was, coarsely (45s, 3m, 5h, 2d); "-" when unknown.
func age(t time.Time, unixMs int64) string {
	if unixMs <= 0 {
		return "-"
	}
	d := max(t.Sub(time.UnixMilli(unixMs)), 0)
	switch {
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}
