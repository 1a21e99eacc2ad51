package node_test

import (
	"context"
	"sync"
	"testing"

	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
)

// BenchmarkForwardDuringStream is a call that node 1 forwards to the
// owner on node 2 while a 64 MiB state moves between the two, back and
// forth: the forward and half of the moves go from node 1 to node 2. Its
// latency beside the same forward with nothing moving (p50, p99).
func BenchmarkForwardDuringStream(b *testing.B) {
	m := startMesh(b, 2)
	ctx := context.Background()
	direct := newClient(b, client.Config{Etcd: m.etcd})
	place := func(name, method, arg string, on int) {
		if _, err := direct.Call(ctx, name, method, arg); err != nil {
			b.Fatal(err)
		}
		for i, n := range m.nodes {
			if i != on {
				if _, err := n.Relocate(ctx, name, node.RelocateOptions{Target: m.nodes[on].Self().ID}); err == nil {
					return
				}
			}
		}
	}
	place("actor/counter/fw", "add", "1", 1)
	place("actor/blob/big", "fill", "67108864", 0)
	gw := newClient(b, client.Config{Nodes: []string{m.nodes[0].Address()}})
	call := func() error { _, err := gw.Call(ctx, "actor/counter/fw", "get"); return err }
	b.Run("idle", func(b *testing.B) { timed(b, call) })
	b.Run("stream", func(b *testing.B) {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			at := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				to := 1 - at
				if st, err := m.nodes[at].Relocate(ctx, "actor/blob/big", node.RelocateOptions{Target: m.nodes[to].Self().ID, NoPrecopy: true}); err == nil && st.GetOutcome() == "completed" {
					at = to
				}
			}
		})
		timed(b, call)
		close(stop)
		wg.Wait()
	})
}
