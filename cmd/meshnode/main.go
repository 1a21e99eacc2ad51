// Command meshnode hosts objects and routes calls to their owners
// (DESIGN.md §7, §10). SIGINT/SIGTERM stop it cleanly.
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

	"github.com/meshloc/meshloc/internal/failpoint"
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := n.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "meshnode:", err)
		return 1
	}
	select {
	case <-ctx.Done():
		log.Info().Msg("signal: stopping")
	case <-n.Keeper().Done():
		if failpoint.Planted(failpoint.BugWokenOwnerServes) {
			// Planted (failpoints builds only): a fenced node serves on
			// until it is told to stop.
			log.Error().Err(n.Keeper().Err()).Msg("lease ended: serving on (planted bug woken-owner-serves)")
			<-ctx.Done()
			break
		}
		log.Error().Err(n.Keeper().Err()).Msg("lease ended: stopping")
	}
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := n.Stop(sctx); err != nil {
		fmt.Fprintln(os.Stderr, "meshnode: stop:", err)
		return 1
	}
	if n.Keeper().Err() != nil && ctx.Err() == nil {
		return 1
	}
	return 0
}
