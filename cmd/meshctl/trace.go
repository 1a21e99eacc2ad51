package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshloc/meshloc/pkg/tracing"
)

// cmdTrace is one meshctl command's trace: with an OTLP endpoint in the
// environment (OTEL_EXPORTER_OTLP_ENDPOINT), the command is a span whose
// context its requests carry (to locationd's API, to a gateway, to the
// nodes), and -v prints the trace's id on stderr once it is done.
type cmdTrace struct {
	verbose bool
	span    trace.Span
	ctx     context.Context
	stop    func(context.Context) error
}

// attach adds -v to root and starts the trace after root's own checks.
func (t *cmdTrace) attach(root *cobra.Command) {
	root.PersistentFlags().BoolVarP(&t.verbose, "verbose", "v", false,
		"print the id of the command's trace on stderr (traces go to $OTEL_EXPORTER_OTLP_ENDPOINT; without it there is none)")
	pre := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if err := pre(cmd, args); err != nil {
			return err
		}
		stop, err := tracing.Setup(cmd.Context(), tracing.Config{Service: "meshctl"}, "")
		if err != nil {
			return usageError{err: err}
		}
		t.stop = stop
		ctx, span := tracing.Start(cmd.Context(), "meshctl "+cmd.CommandPath(), trace.SpanKindClient)
		t.ctx, t.span = ctx, span
		cmd.SetContext(ctx)
		return nil
	}
}

// finish ends the command's span, prints its trace id with -v, and sends
// what is buffered.
func (t *cmdTrace) finish(err error, stderr io.Writer) {
	if t.span == nil {
		return
	}
	if err != nil {
		tracing.Fail(t.span, err.Error())
	}
	t.span.End()
	if t.verbose {
		if id := tracing.TraceID(t.ctx); id != "" {
			fmt.Fprintf(stderr, "trace %s\n", id)
		} else {
			fmt.Fprintln(stderr, "trace: none (tracing is off: set OTEL_EXPORTER_OTLP_ENDPOINT)")
		}
	}
	// A second at most: a command waits for no collector that is gone,
	// and its failure is not the command's.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = t.stop(ctx)
}
