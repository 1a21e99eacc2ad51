package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/client"
)

// eventTypes are the types meshctl events --types may name.
var eventTypes = []string{api.EventOwner, api.EventRecord, api.EventRelocation, api.EventStats, api.EventWatch, api.EventReset}

func eventsCmd(g *globals, out io.Writer) *cobra.Command {
	var q client.EventsQuery
	var types []string
	var follow time.Duration
	cmd := &cobra.Command{
		Use:   "events",
		Short: "follow locationd's event stream: records, owners, relocations, node stats",
		Long: `Follow GET /v1/events: one line per event, TIME TYPE ID DATA (DATA is the
event's JSON); -o json prints each event as one JSON object per line
({"id","type","data"}). --types keeps those types (` + strings.Join(eventTypes, ",") + `;
default: all), --object one object's record and relocation events. A stream
that breaks is opened again where it stopped (the next hello says whether
anything was missed: "resumed":false). Runs until Ctrl-C, or for --for.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, t := range types {
				if !slices.Contains(eventTypes, t) {
					return badArgument("--types", fmt.Errorf("%q (want some of %s)", t, strings.Join(eventTypes, ",")))
				}
			}
			q.Types = types
			if q.Object != "" {
				if _, err := parseObject("--object", q.Object); err != nil {
					return err
				}
			}
			ctx, cancel, err := forFlag(cmd.Context(), follow)
			if err != nil {
				return err
			}
			defer cancel()
			c, err := g.client()
			if err != nil {
				return err
			}
			return followEvents(ctx, c, q, func(ev client.Event) error { return printEvent(out, g.output == "json", ev) })
		},
	}
	cmd.Flags().StringSliceVar(&types, "types", nil, "only these event types, comma-separated")
	cmd.Flags().StringVar(&q.Object, "object", "", "only this object's record and relocation events")
	cmd.Flags().DurationVar(&follow, "for", 0, "stop after this long (0: at Ctrl-C)")
	return cmd
}

// forFlag is ctx bounded by a --for of d (0: until Ctrl-C; negative: a
// usage error).
func forFlag(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc, error) {
	switch {
	case d < 0:
		return ctx, func() {}, usageError{err: fmt.Errorf("--for %s must not be negative", d)}
	case d == 0:
		ctx, cancel := context.WithCancel(ctx)
		return ctx, cancel, nil
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	return ctx, cancel, nil
}

// followEvents follows the event stream into f until ctx ends, which is how
// it stops (nil: Ctrl-C, or --for over); a silent stream is opened again
// after watchIdle.
func followEvents(ctx context.Context, c *client.Admin, q client.EventsQuery, f func(client.Event) error) error {
	q.Idle = watchIdle
	err := c.Events(ctx, q, f)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// printEvent writes one event: a line TIME TYPE ID DATA, or one JSON
// object. Data that is not JSON (a stream gone wrong) is printed as a
// string, quoted: a line never carries raw bytes of the server's.
func printEvent(out io.Writer, asJSON bool, ev client.Event) error {
	data := ev.Data
	if !json.Valid(data) {
		data, _ = json.Marshal(string(ev.Data))
	}
	if asJSON {
		b, err := json.Marshal(struct {
			ID   string          `json:"id"`
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		}{ev.ID, ev.Type, data})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", b)
		return err
	}
	_, err := fmt.Fprintf(out, "%s %s %s %s\n", now().Format("15:04:05.000"), printable(ev.Type), dash(printable(ev.ID)), data)
	return err
}

// printable is s with what a terminal would act on escaped (Go's quoting,
// without the quotes).
func printable(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}
