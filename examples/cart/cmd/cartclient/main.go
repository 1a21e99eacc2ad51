// Command cartclient calls carts through meshloc and moves one: the client
// side of the cart example.
//
//	cartclient --locationd http://127.0.0.1:7070 --etcd http://127.0.0.1:2379 --cart actor/cart/alice
//
// It adds a few items, reads the cart, relocates it to another node (the
// call returns at once with the relocation's id; Wait follows it), and
// reads it again on its new owner: the same items.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/meshloc/meshloc/pkg/client"

	"example.com/cart/cart"
)

func main() {
	locationd := flag.String("locationd", "http://127.0.0.1:7070", "locationd's API")
	etcd := flag.String("etcd", "http://127.0.0.1:2379", "etcd endpoints, comma-separated (calls go straight to owners)")
	name := flag.String("cart", "actor/cart/alice", "the cart")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(ctx, client.Config{EtcdEndpoints: strings.Split(*etcd, ","), Locationd: *locationd})
	if err != nil {
		fail(err)
	}
	defer c.Close()

	for _, item := range []string{"apple", "bread", "coffee"} {
		if _, err := c.Call(ctx, *name, "add", item, "1"); err != nil {
			fail(err)
		}
	}
	before := view(ctx, c, *name)
	owner, err := c.Get(ctx, *name)
	if err != nil {
		fail(err)
	}
	fmt.Printf("%s on %s: %v\n", *name, owner.Record.Owner, before.Names())

	id, err := c.Relocate(ctx, *name, client.RelocateOptions{})
	if err != nil {
		fail(err)
	}
	r, err := c.Wait(ctx, id)
	if err != nil {
		fail(err)
	}
	fmt.Printf("relocation %s: %s, interrupted %d µs\n", id, r.Outcome, r.InterruptionMicros)
	after := view(ctx, c, *name)
	owner, _ = c.Get(ctx, *name)
	fmt.Printf("%s on %s: %v\n", *name, owner.Record.Owner, after.Names())
}

func view(ctx context.Context, c *client.Client, name string) cart.View {
	rep, err := c.Call(ctx, name, "items")
	if err != nil {
		fail(err)
	}
	var v cart.View
	if err := json.Unmarshal(rep.Payload, &v); err != nil {
		fail(err)
	}
	return v
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "cartclient:", err)
	os.Exit(1)
}
