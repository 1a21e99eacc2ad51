package bench

import (
	"context"

	"github.com/meshloc/meshloc/internal/bench/durablebench"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// durable is the durable section (opt-in: --only durable), measured by
// internal/bench/durablebench: node children, one at a time, on an etcd
// of the section's own, and a PostgreSQL server it launches.
func (x *run) durable() error {
	m, done, err := x.scaleCluster("durable", nil)
	if err != nil {
		return err
	}
	defer done()
	start := func(ctx context.Context, name, web string, args ...string) (*client.Client, func(), error) {
		return startLone(ctx, m, keyspace.DefaultCluster, name, web, args...) // stopped, its owner key goes: the next node is alone
	}
	return durablebench.Run(x.ctx, durablebench.Env{Etcd: m.ec, StartNode: start, Step: x.step, Base: x.base, Fig: x.fig}, x.cfg.Plan.Durable)
}
