// Package nodemain runs a meshnode process's life on pkg/node: start, then
// serve until a signal (SIGTERM or SIGINT drains, a second one stops at
// once), a drain asked through AdminService, or the end of the lease;
// SIGHUP reloads the TLS certificate. cmd/meshnode is a flag parser over
// it, and the bench's child processes run it too, so every process that
// claims to be a meshnode behaves as one.
package nodemain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/internal/cliutil"
	"github.com/meshloc/meshloc/internal/logging"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/tracing"
)

// ErrFailed: the node ran and ended badly (its lease was lost); the log
// says why.
var ErrFailed = errors.New("the node's lease ended")

// UsageError marks a configuration that cannot be run.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Program is what a process runs beside meshnode's defaults: its name (in
// logs), the object types it registers, and options for node.New.
type Program struct {
	Name        string
	Register    []func(*actor.Registry) error
	NodeOptions []node.Option
}

// Builtin is the meshnode command's program: the built-in types.
var Builtin = Program{Name: "meshnode", Register: []func(*actor.Registry) error{builtin.Register}}

// Serve runs a node of p's types until a signal, a drain through AdminService, or the
// end of its lease.
func Serve(cfg node.Config, stderr io.Writer, p Program) error {
	log, err := logging.New(stderr, cfg.LogLevel, cfg.LogFormat, p.Name)
	if err != nil {
		return UsageError{err}
	}
	tc := cfg.Tracing
	if tc.Service == "" {
		tc.Service = p.Name
	}
	stopTracing, err := tracing.Setup(context.Background(), tc, cfg.Name)
	if err != nil {
		return UsageError{err}
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = stopTracing(ctx) // what is still buffered; a collector gone is not the node's failure
	}()
	reg := actor.NewRegistry()
	for _, r := range p.Register {
		if err := r(reg); err != nil {
			return err
		}
	}
	n, err := node.New(cfg, append(append([]node.Option(nil), p.NodeOptions...), node.WithRegistry(reg), node.WithLogger(log))...)
	if err != nil {
		return UsageError{err}
	}
	// The first SIGTERM/SIGINT cancels ctx (start, or drain then stop); a
	// second one cancels skip (the drain ends, the node stops at once).
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, onSignal := context.WithCancel(context.Background())
	defer onSignal()
	skip, onSecond := context.WithCancel(context.Background())
	defer onSecond()
	go watchSignals(log, sigs, onSignal, onSecond) // ends with the process
	if err := n.Start(ctx); err != nil {
		return err
	}
	defer cliutil.ReloadOnHangup(log, n.ReloadTLS)()
	clean := false // told to stop: exit status 0
	select {
	case <-ctx.Done():
		log.Info().Dur("drainTimeout", cfg.DrainTimeout).Msg("signal: draining, then stopping (a second SIGTERM or SIGINT stops at once)")
		drain(skip, log, n, cfg)
		clean = true
	case <-n.StopRequested():
		log.Info().Msg("drained through AdminService: stopping")
		clean = true
	case <-n.Fenced():
		log.Error().Err(n.Keeper().Err()).Msg("lease ended: stopping")
	}
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := n.Stop(sctx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	if n.Keeper().Err() != nil && !clean && ctx.Err() == nil {
		return ErrFailed
	}
	return nil
}

// watchSignals turns the first signal into onSignal and the second into
// onSecond.
func watchSignals(log zerolog.Logger, sigs <-chan os.Signal, onSignal, onSecond context.CancelFunc) {
	s := <-sigs
	log.Info().Str("signal", s.String()).Msg("signal received")
	onSignal()
	s = <-sigs
	log.Warn().Str("signal", s.String()).Msg("second signal: skipping the rest of the drain")
	onSecond()
}

// drain moves every hosted object away (node.Drain), until skip ends: the
// drain ends by itself when it stops moving objects (--drain-timeout), and
// at most node.MaxDrainTimeout after it began, plus the end of the
// relocations in flight then.
func drain(skip context.Context, log zerolog.Logger, n *node.Node, cfg node.Config) {
	ctx, cancel := context.WithTimeout(skip, node.MaxDrainTimeout+cfg.RelocationTimeout+10*time.Second)
	defer cancel()
	rep, err := n.Drain(ctx, node.DrainOptions{})
	if err != nil {
		log.Error().Err(err).Msg("drain failed: stopping anyway")
		return
	}
	// The node logged the report ("drained") and each object not moved.
	log.Info().Int("moved", len(rep.Moved)).Int("failed", len(rep.Failed)).Msg("drain ended: stopping")
}
