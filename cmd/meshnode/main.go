// Command meshnode hosts objects and routes calls to their owners
// (DESIGN.md §7, §10). SIGTERM or SIGINT drains it (every hosted object is
// moved to another node, bounded by --drain-timeout), then stops it (its
// lease revoked last); a second SIGTERM or SIGINT skips the rest of the drain
// and stops at once. A drain asked through AdminService (meshctl drain)
// stops it too. Exit status 0 after a drain, even if some objects could not
// be moved (the log lists them). SIGHUP reloads its TLS certificate.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/internal/cliutil"
	"github.com/meshloc/meshloc/internal/node"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cfg := node.DefaultConfig()
	fs := flag.NewFlagSet("meshnode", flag.ContinueOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if err := node.ApplyEnv(fs, given); err != nil {
		fmt.Fprintln(os.Stderr, "meshnode:", err)
		return 2
	}
	level, err := zerolog.ParseLevel(cfg.LogLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "meshnode: --log-level:", err)
		return 2
	}
	log := zerolog.New(os.Stderr).Level(level).With().Timestamp().Logger()
	reg := actor.NewRegistry()
	if err := builtin.Register(reg); err != nil {
		fmt.Fprintln(os.Stderr, "meshnode:", err)
		return 1
	}
	n, err := node.New(cfg, node.Options{Registry: reg, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "meshnode:", err)
		return 2
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
		fmt.Fprintln(os.Stderr, "meshnode:", err)
		return 1
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
		fmt.Fprintln(os.Stderr, "meshnode: stop:", err)
		return 1
	}
	if n.Keeper().Err() != nil && !clean && ctx.Err() == nil {
		return 1
	}
	return 0
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

// drain moves every hosted object away (node.Drain), bounded by
// --drain-timeout plus the end of the relocations in flight then, or until
// skip ends.
func drain(skip context.Context, log zerolog.Logger, n *node.Node, cfg node.Config) {
	ctx, cancel := context.WithTimeout(skip, cfg.DrainTimeout+cfg.RelocationTimeout+10*time.Second)
	defer cancel()
	rep, err := n.Drain(ctx, node.DrainOptions{})
	if err != nil {
		log.Error().Err(err).Msg("drain failed: stopping anyway")
		return
	}
	// The node logged the report ("drained") and each object not moved.
	log.Info().Int("moved", len(rep.Moved)).Int("failed", len(rep.Failed)).Msg("drain ended: stopping")
}
