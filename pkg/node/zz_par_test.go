package node_test

import (
	"context"
	"testing"

	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
)

func BenchmarkZZPar(b *testing.B) {
	m := startMesh(b, 2, func(i int, c *node.Config) {
		if i == 1 {
			c.Weight = 0
		}
	})
	ctx := context.Background()
	direct := newClient(b, client.Config{Etcd: m.etcd})
	for _, o := range []string{"a", "b", "c", "d"} {
		if _, err := direct.Call(ctx, "actor/counter/"+o, "add", "1"); err != nil {
			b.Fatal(err)
		}
	}
	gateway := newClient(b, client.Config{Nodes: []string{m.nodes[1].Address()}})
	for _, tc := range []struct {
		name string
		c    *client.Client
	}{{"direct", direct}, {"gateway", gateway}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					if _, err := tc.c.Call(ctx, "actor/counter/"+[]string{"a", "b", "c", "d"}[i%4], "add", "1"); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
