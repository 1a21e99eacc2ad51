// Command cartnode is a meshloc node of your own: it hosts carts (package
// cart) and takes every flag of meshnode (--name, --etcd-endpoints,
// --listen, --version, --log-level, ...), plus --cart-ttl. It joins the same
// cluster as the stock meshnodes, which route calls for carts here as
// gateways; locationd relocates and drains it like any node.
//
//	cartnode --name c1 --listen 127.0.0.1:7200 --http 127.0.0.1:7201
//
// It behaves exactly as meshnode does, because it is the same call
// (meshnode.Main): SIGTERM or SIGINT drains it (its carts move to another
// cart node), then stops it; meshctl drain does the same and it exits 0.
package main

import (
	"flag"
	"os"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/meshnode"

	"example.com/cart/cart"
)

func main() {
	var ttl time.Duration
	os.Exit(meshnode.Main(
		meshnode.Named("cartnode"),
		meshnode.Flags(func(fs *flag.FlagSet) {
			fs.DurationVar(&ttl, "cart-ttl", 30*time.Minute, "empty a cart left untouched this long")
		}),
		// Runs after the flags were read: --cart-ttl is known.
		meshnode.Register(func(reg *actor.Registry) error { return cart.Register(reg, ttl) }),
	))
}
