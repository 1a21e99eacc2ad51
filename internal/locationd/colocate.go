package locationd

import (
	"context"
	"slices"
	"sync"

	"github.com/meshloc/meshloc/internal/rebalance"
	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// maxTrafficEdgesPerNode bounds what locationd takes of one node's traffic
// sketch (a node keeps --traffic-edges, 4096 by default).
const maxTrafficEdgesPerNode = 1 << 20

// trafficEdges asks every live owner for its traffic sketch
// (AdminService.Traffic), concurrently, each bounded by NodeListTimeout,
// and returns the edges of all of them (an edge counted by several nodes —
// its sender moved — is summed by the planner) and which nodes answered.
// Names that are not canonical actor names are dropped: a node's answer is
// input like any other.
func (h *handlers) trafficEdges(ctx context.Context) ([]rebalance.Edge, *api.RebalanceTraffic) {
	tr := &api.RebalanceTraffic{}
	owners, _, err := lease.ListOwners(ctx, h.cli, h.s.keys)
	if err != nil {
		tr.Unreachable = append(tr.Unreachable, "owners: "+err.Error())
		return nil, tr
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var edges []rebalance.Edge
	for _, o := range owners {
		d := o.Descriptor
		if d.Address == "" {
			continue
		}
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, NodeListTimeout)
			defer cancel()
			var r *pb.TrafficReply
			err := h.pool.call(nctx, d.Address, func(ctx context.Context, c rpcpb.AdminServiceClient) error {
				var err error
				r, err = c.Traffic(ctx, &pb.TrafficRequest{})
				return err
			})
			var mine []rebalance.Edge
			if err == nil {
				for _, e := range r.GetEdges()[:min(len(r.GetEdges()), maxTrafficEdgesPerNode)] {
					if actorName(e.GetFrom()) && actorName(e.GetTo()) && e.GetCount() > 0 {
						mine = append(mine, rebalance.Edge{From: e.GetFrom(), To: e.GetTo(), Weight: min(e.GetCount(), 1<<40)})
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				tr.Unreachable = append(tr.Unreachable, d.OwnerID)
				return
			}
			tr.Nodes++
			edges = append(edges, mine...)
		})
	}
	wg.Wait()
	slices.Sort(tr.Unreachable)
	return edges, tr
}

func actorName(s string) bool {
	o, err := keyspace.ParseObject(s)
	return err == nil && o.Kind == keyspace.KindActor && o.String() == s
}
