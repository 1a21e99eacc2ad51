package node_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
)

// greeter counts the greetings it made: the object type of the example.
type greeter struct{ n int }

func (g *greeter) Handle(_ actor.Context, method string, args [][]byte) ([]byte, error) {
	if method != "greet" || len(args) != 1 {
		return nil, actor.InvalidArgument("greet NAME")
	}
	g.n++
	return fmt.Appendf(nil, "hello %s (%d)", args[0], g.n), nil
}

func (g *greeter) Snapshot() ([]byte, error) { return fmt.Appendf(nil, "%d", g.n), nil }
func (g *greeter) Restore(b []byte) error {
	_, err := fmt.Sscanf(string(b), "%d", &g.n)
	return err
}

// Two nodes of your own, hosting your own type: a call creates the object
// on one of them, Relocate moves it (with its state) to the other, and
// calls follow it.
func Example() {
	etcd, stop := etcdtest.ForExample() // an etcd in this process, for the example
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	reg := actor.NewRegistry()
	if err := reg.Register(actor.Type{Name: "greeter", New: func() actor.Object { return &greeter{} }}); err != nil {
		panic(err)
	}
	nodes := map[string]*node.Node{}
	for _, name := range []string{"n1", "n2"} {
		cfg := node.DefaultConfig()
		cfg.Name, cfg.EtcdEndpoints = name, []string{etcd}
		cfg.Listen, cfg.HTTP = "127.0.0.1:0", "" // a free port; no metrics endpoint
		n, err := node.New(cfg, node.WithRegistry(reg))
		if err != nil {
			panic(err)
		}
		if err := n.Start(ctx); err != nil {
			panic(err)
		}
		defer n.Stop(context.Background())
		nodes[name] = n
	}

	c, err := client.New(ctx, client.Config{EtcdEndpoints: []string{etcd}})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	r, err := c.Call(ctx, "actor/greeter/g1", "greet", "world")
	if err != nil {
		panic(err)
	}
	fmt.Println(string(r.Payload))

	// Its owner moves it to the other node, state included.
	st, err := nodes[r.Node].Relocate(ctx, "actor/greeter/g1", node.RelocateOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println(st.GetOutcome(), strings.HasPrefix(st.GetTarget(), r.Node))
	r, err = c.Call(ctx, "actor/greeter/g1", "greet", "again")
	if err != nil {
		panic(err)
	}
	fmt.Println(string(r.Payload))
	// Output:
	// hello world (1)
	// completed false
	// hello again (2)
}
