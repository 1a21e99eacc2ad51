// Command inventoryclient stocks and reserves in a warehouse, then moves it:
// the client side of the inventory example.
//
//	inventoryclient --locationd http://127.0.0.1:7070 --etcd http://127.0.0.1:2379
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

func main() {
	locationd := flag.String("locationd", "http://127.0.0.1:7070", "locationd's API")
	etcd := flag.String("etcd", "http://127.0.0.1:2379", "etcd endpoints, comma-separated")
	name := flag.String("warehouse", "actor/inventory/berlin", "the warehouse")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(ctx, client.Config{EtcdEndpoints: strings.Split(*etcd, ","), Locationd: *locationd})
	if err != nil {
		fail(err)
	}
	defer c.Close()

	call := func(method string, args ...string) string {
		rep, err := c.Call(ctx, *name, method, args...)
		if err != nil {
			// An application refusal comes back as a typed error.
			var we *wire.Error
			if errors.As(err, &we) && we.Code == pb.Code_CODE_APPLICATION_ERROR {
				return "refused: " + we.Message
			}
			fail(err)
		}
		return string(rep.Payload)
	}
	fmt.Println("stock 10:   ", call("stock", "sku-1", "10"))
	fmt.Println("reserve 4:  ", call("reserve", "sku-1", "4"))
	fmt.Println("reserve 7:  ", call("reserve", "sku-1", "7"))

	id, err := c.Relocate(ctx, *name, client.RelocateOptions{})
	if err != nil {
		fail(err)
	}
	r, err := c.Wait(ctx, id)
	if err != nil {
		fail(err)
	}
	fmt.Printf("moved %s -> %s: %s\n", r.Source, r.Target, r.Outcome)
	fmt.Println("level:      ", call("level", "sku-1"))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "inventoryclient:", err)
	os.Exit(1)
}
