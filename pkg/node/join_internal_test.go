package node

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/node/reloclog"
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
	p := reloclog.NewJoin(wire.NewRelocationID(), "actor/counter/a", "group/g")
	n.joins.Add(p, func() bool { return false })
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() { n.joins.Retire(p, &pb.RelocationStatus{Outcome: "completed"}) })
	}
	wg.Wait()
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
