// Command inventorynode is a meshloc node of your own hosting durable
// warehouses (package inventory) beside the built-in types; it takes every
// flag of meshnode.
//
//	inventorynode --name w1 --listen 127.0.0.1:7300 --http 127.0.0.1:7301
//
// Kill it (kill -9): every acknowledged change is in etcd, and the next call
// re-activates its warehouses on another node that hosts the type.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/node"

	"example.com/inventory/inventory"
)

func main() {
	cfg := node.DefaultConfig()
	cfg.AddFlags(flag.CommandLine)
	flag.Parse()

	log := zerolog.New(os.Stderr).With().Timestamp().Str("node", cfg.Name).Logger()
	reg := actor.NewRegistry()
	if err := builtin.Register(reg); err != nil {
		fail(err)
	}
	if err := inventory.Register(reg); err != nil {
		fail(err)
	}
	n, err := node.New(cfg, node.WithRegistry(reg), node.WithLogger(log))
	if err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := n.Start(ctx); err != nil {
		fail(err)
	}
	select {
	case <-ctx.Done():
		dctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout+cfg.RelocationTimeout)
		_, _ = n.Drain(dctx, node.DrainOptions{})
		cancel()
	case <-n.StopRequested():
	case <-n.Fenced():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := n.Stop(sctx); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "inventorynode:", err)
	os.Exit(1)
}
