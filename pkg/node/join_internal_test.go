package node

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Seed bug 26: an Actor Join's retirement is memoized. However many paths
// retire one profile, at once, it leaves the pending set once, is counted
// once and gets one tombstone.
func TestSeedBug26_JoinRetiredOnce(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Name = "n1"
	n, err := New(cfg, WithRegistry(actor.NewRegistry()), WithMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	p := &joinProfile{id: wire.NewRelocationID(), actor: "actor/counter/a", group: "group/g", ready: make(chan struct{}), done: make(chan struct{})}
	n.joins.pending = map[wire.RelocationID]*joinProfile{p.id: p}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() { n.retireJoin(p, &pb.RelocationStatus{Outcome: "completed"}) })
	}
	wg.Wait()
	<-p.done
	if n.PendingJoins() != 0 || len(n.RecentJoins()) != 1 {
		t.Fatalf("pending %d, tombstones %d", n.PendingJoins(), len(n.RecentJoins()))
	}
	mfs, err := n.metrics.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == "meshloc_join_cleanups_total" {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
		}
	}
	if v != 1 {
		t.Fatalf("retired %v times", v)
	}
}
