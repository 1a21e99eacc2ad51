// Package examplecluster starts a whole meshloc cluster in one process for
// the runnable examples of the public packages (which have no testing.T):
// locationd with its embedded etcd, and nodes hosting the built-in types.
// It is test scaffolding, not an API: programs run locationd and meshnode
// as processes (or embed pkg/node).
package examplecluster

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/internal/freeport"
	"github.com/meshloc/meshloc/internal/locationd"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/node"
)

// Cluster is locationd (with its embedded etcd) and nodes n1..nN.
type Cluster struct {
	// Locationd is its API URL; Etcd its etcd's client endpoint.
	Locationd, Etcd string
	Nodes           []*node.Node
	stop            []func()
}

// Start starts locationd and nodes nodes; it panics when one cannot start.
func Start(nodes int) *Cluster {
	dir, err := os.MkdirTemp("", "meshloc-example-")
	must(err)
	c := &Cluster{stop: []func(){func() { os.RemoveAll(dir) }}}
	cfg := locationd.DefaultConfig()
	cfg.DataDir = dir
	cfg.ListenClient, cfg.ListenPeer = "http://"+addr(), "http://"+addr()
	cfg.HTTP = "127.0.0.1:0"
	srv, err := locationd.New(cfg, zerolog.Nop())
	must(err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	c.stop = append(c.stop, func() { cancel(); <-done })
	select {
	case <-srv.Ready():
	case err := <-done:
		panic(fmt.Sprintf("locationd: %v", err))
	}
	c.Locationd, c.Etcd = "http://"+srv.HTTPAddr(), cfg.ListenClient
	reg := actor.NewRegistry()
	must(builtin.Register(reg))
	for i := range nodes {
		ncfg := node.DefaultConfig()
		ncfg.Name, ncfg.EtcdEndpoints = fmt.Sprintf("n%d", i+1), []string{c.Etcd}
		ncfg.Listen, ncfg.HTTP = "127.0.0.1:0", ""
		n, err := node.New(ncfg, node.WithRegistry(reg))
		must(err)
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		err = n.Start(sctx)
		scancel()
		must(err)
		c.Nodes = append(c.Nodes, n)
		c.stop = append(c.stop, func() { _ = n.Stop(context.Background()) })
	}
	return c
}

// Stop stops everything and removes its data.
func (c *Cluster) Stop() {
	for i := len(c.stop) - 1; i >= 0; i-- {
		c.stop[i]()
	}
}

func addr() string {
	a, err := freeport.Addr()
	must(err)
	return a
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
