package bench

import (
	"context"
	"time"

	"github.com/meshloc/meshloc/internal/bench/tracebench"
	"github.com/meshloc/meshloc/pkg/client"
)

// tracing is the tracing section (opt-in: --only tracing), measured by
// internal/bench/tracebench: node children, each alone in a cluster of
// its own, on an etcd of the section's own.
func (x *run) tracing() error {
	m, done, err := x.scaleCluster("tracing", nil)
	if err != nil {
		return err
	}
	defer done()
	start := func(ctx context.Context, name string, args ...string) (*client.Client, func(), error) {
		return startLone(ctx, m, name, name, "", args...)
	}
	return tracebench.Run(x.ctx, tracebench.Env{StartNode: start, Step: x.step, Base: x.base, Fig: x.fig}, x.cfg.Plan.Tracing)
}

// startLone is a section's StartNode: loneNodeIn, and a stop that closes
// the client and ends the node.
func startLone(ctx context.Context, m *mesh, cluster, name, web string, args ...string) (*client.Client, func(), error) {
	n, cl, err := loneNodeIn(ctx, m, cluster, name, web, args...)
	if err != nil {
		return nil, nil, err
	}
	return cl, func() { cl.Close(); _ = n.stop(30 * time.Second) }, nil
}
