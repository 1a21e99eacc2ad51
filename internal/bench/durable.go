package bench

import (
	"context"
	"time"

	"github.com/meshloc/meshloc/internal/bench/durablebench"
	"github.com/meshloc/meshloc/pkg/client"
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
		n, cl, err := loneNode(ctx, m, name, web, args...)
		if err != nil {
			return nil, nil, err
		}
		return cl, func() { cl.Close(); _ = n.stop(30 * time.Second) }, nil // its owner key goes: the next node is alone
	}
	return durablebench.Run(x.ctx, durablebench.Env{Etcd: m.ec, StartNode: start, Step: x.step, Base: x.base, Fig: x.fig}, x.cfg.Plan.Durable)
}
