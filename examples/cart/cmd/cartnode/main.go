// Command cartnode is a meshloc node of your own: it hosts carts (package
// cart) and takes every flag of meshnode (--name, --etcd-endpoints,
// --listen, ...), plus --cart-ttl. It joins the same cluster as the stock
// meshnodes, which route calls for carts here as gateways; locationd
// relocates and drains it like any node.
//
//	cartnode --name c1 --listen 127.0.0.1:7200 --http 127.0.0.1:7201
//
// SIGTERM or SIGINT drains it (its carts move to another cart node), then
// stops it.
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
	"github.com/meshloc/meshloc/pkg/node"

	"example.com/cart/cart"
)

func main() {
	cfg := node.DefaultConfig()
	cfg.AddFlags(flag.CommandLine)
	ttl := flag.Duration("cart-ttl", 30*time.Minute, "empty a cart left untouched this long")
	flag.Parse()

	log := zerolog.New(os.Stderr).With().Timestamp().Str("node", cfg.Name).Logger()
	reg := actor.NewRegistry()
	if err := cart.Register(reg, *ttl); err != nil {
		fail(err)
	}
	n, err := node.New(cfg, node.WithRegistry(reg), node.WithLogger(log),
		node.OnReady(func() { log.Info().Msg("cart node serving") }),
		node.OnOwnershipLost(func(object string) { log.Warn().Str("object", object).Msg("etcd names another owner") }))
	if err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := n.Start(ctx); err != nil {
		fail(err)
	}
	select {
	case <-ctx.Done(): // a signal: move the carts away first
		dctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout+cfg.RelocationTimeout)
		rep, err := n.Drain(dctx, node.DrainOptions{})
		cancel()
		if err != nil {
			log.Error().Err(err).Msg("drain")
		} else {
			log.Info().Int("moved", len(rep.Moved)).Int("failed", len(rep.Failed)).Msg("drained")
		}
	case <-n.StopRequested(): // drained through locationd (meshctl drain)
	case <-n.Fenced(): // the lease ended: it must not serve again
	}
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := n.Stop(sctx); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "cartnode:", err)
	os.Exit(1)
}
