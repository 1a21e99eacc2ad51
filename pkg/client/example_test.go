package client_test

import (
	"context"
	"fmt"
	"time"

	"github.com/meshloc/meshloc/internal/examplecluster"
	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/client"
)

// Calls go straight to each object's owner, routed from etcd; a retry of a
// call (CallOp with the same operation id) is never executed twice.
func ExampleClient_Call() {
	cluster := examplecluster.Start(2) // locationd and two meshnodes, in this process
	defer cluster.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c, err := client.New(ctx, client.Config{EtcdEndpoints: []string{cluster.Etcd}})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	for range 3 {
		r, err := c.Call(ctx, "actor/counter/visits", "add", "1")
		if err != nil {
			panic(err)
		}
		fmt.Println(string(r.Payload))
	}
	// Output:
	// {"value":1}
	// {"value":2}
	// {"value":3}
}

// Relocate answers at once with the relocation's id; Wait follows it to its
// outcome (Relocation reads it at any time).
func ExampleClient_Relocate() {
	cluster := examplecluster.Start(2)
	defer cluster.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c, err := client.New(ctx, client.Config{EtcdEndpoints: []string{cluster.Etcd}, Locationd: cluster.Locationd})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	if _, err := c.Call(ctx, "actor/counter/c1", "add", "5"); err != nil {
		panic(err)
	}
	before, err := c.Get(ctx, "actor/counter/c1")
	if err != nil {
		panic(err)
	}
	id, err := c.Relocate(ctx, "actor/counter/c1", client.RelocateOptions{})
	if err != nil {
		panic(err)
	}
	r, err := c.Wait(ctx, id)
	if err != nil {
		panic(err)
	}
	after, _ := c.Get(ctx, "actor/counter/c1")
	v, _ := c.Call(ctx, "actor/counter/c1", "get")
	fmt.Println(r.Outcome == api.OutcomeCompleted, after.Record.Owner != before.Record.Owner, string(v.Payload))
	// Output:
	// true true {"value":5}
}

// Owners lists the nodes as etcd knows them, through locationd.
func ExampleClient_Owners() {
	cluster := examplecluster.Start(2)
	defer cluster.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c, err := client.New(ctx, client.Config{Locationd: cluster.Locationd}) // operating only: no calls
	if err != nil {
		panic(err)
	}
	defer c.Close()
	owners, err := c.Owners(ctx)
	if err != nil {
		panic(err)
	}
	for _, o := range owners {
		fmt.Println(o.ID, o.State)
	}
	// Output:
	// n1 serving
	// n2 serving
}
