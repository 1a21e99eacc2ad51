package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshloc/meshloc/internal/promscrape"
)

// gateway picks the victim of a kill-gateway fault: the live node holding
// the most open sessions (as its /metrics says), among the nodes that own
// no workload object when one of them holds sessions, so that the fault
// kills gateways and not the objects behind them.
func (f *Faults) gateway(ctx context.Context) (*Node, string) {
	owned := f.owned(ctx)
	var best *Node
	bestOpen, bestPure := -1.0, false
	for _, n := range f.c.nodes {
		if !n.proc.Alive() || n.stopped {
			continue
		}
		open, err := sessionsOpen(ctx, n.HTTP)
		if err != nil {
			continue
		}
		// Better: a pure gateway (sessions, no workload object) first;
		// then more sessions.
		pure := open > 0 && owned[n.Name] == 0
		if best == nil || (pure && !bestPure) || (pure == bestPure && open > bestOpen) {
			best, bestOpen, bestPure = n, open, pure
		}
	}
	if best == nil {
		return f.busiest(ctx), "no node's metrics answered: the busiest node"
	}
	return best, fmt.Sprintf("gateway of %v sessions, owning %d workload objects", bestOpen, owned[best.Name])
}

// sessionsOpen scrapes meshloc_sessions_open from a node's /metrics.
func sessionsOpen(ctx context.Context, addr string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	v, err := promscrape.Sum(ctx, addr, "meshloc_sessions_open")
	if errors.Is(err, promscrape.ErrNoMetric) {
		return 0, nil
	}
	return v, err
}
