package bench

import (
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/freeport"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/wire"
)

// The scale section's join part: a cluster of p.JoinRecords records (idle
// counters owned by a live owner, "holder", whose key this process keeps:
// none is an orphan), written straight to etcd; then a node child
// (meshnode's defaults) starts and joins: the time from its start to its
// owner key saying serving (it has loaded every record into its location
// cache and the owners into its directory), and its resident set then and
// 5 s later. The bounds are the (10 s, 300 MiB): stated, not
// measured.

const (
	scaleJoinTimeBound = "bound: time for a node to join and serve (stated, not measured)"
	scaleJoinRSSBound  = "bound: RSS of a node that joined (stated, not measured)"
)

func (x *run) scaleJoin(p ScalePlan) error {
	m, done, err := x.scaleCluster("join", nil)
	if err != nil {
		return err
	}
	defer done()
	ctx := x.ctx
	keys := keyspace.Default()
	rid := wire.NewRoutingID().Hex()
	holder, err := lease.Start(ctx, m.ec, keys, lease.Config{OwnerID: "holder", TTL: 10 * time.Second,
		Descriptor: lease.Descriptor{RoutingID: rid, Address: "127.0.0.1:1", State: lease.StateDraining, Weight: 1,
			ApplicationVersion: "1", StartedUnixMs: time.Now().UnixMilli()}})
	if err != nil {
		return err
	}
	defer holder.Close(ctx)
	owner := record.OwnerRef{ID: "holder", Generation: holder.Generation()}
	x.step("scale: join: writing %d records", p.JoinRecords)
	t0 := time.Now()
	if err := writeRecords(x, m.ec, keys, owner, rid, p.JoinRecords); err != nil {
		return err
	}
	x.step("scale: join: %d records written in %s; a node joins", p.JoinRecords, time.Since(t0).Round(time.Millisecond))
	lis, err := freeport.Addr()
	if err != nil {
		return err
	}
	args := append([]string{"--name", "n1", "--etcd-endpoints", m.etcd.Endpoint(), "--listen", lis, "--http", "", "--log-level", "warn"}, p.NodeArgs...)
	start := time.Now()
	n1, err := startChild(ctx, "node", nil, args...)
	if err != nil {
		return err
	}
	defer n1.kill()
	if err := waitServing(ctx, m.ec, keys, "n1", n1); err != nil {
		return err
	}
	took := time.Since(start)
	atServing, _ := n1.rss()
	if err := recSleep(ctx, 5*time.Second); err != nil {
		return err
	}
	after, err := n1.rss()
	if err != nil {
		return err
	}
	x.base(Measure{Name: scaleJoinTimeBound, Value: 10, Unit: "s", N: 1})
	x.base(Measure{Name: scaleJoinRSSBound, Value: 300, Unit: "MiB", N: 1})
	x.fig(Measure{Name: fmt.Sprintf("a node joining %d records: time from its start to serving", p.JoinRecords),
		Value: took.Seconds(), Unit: "s", N: int64(p.JoinRecords)}, scaleJoinTimeBound, le(1))
	x.fig(Measure{Name: fmt.Sprintf("a node joining %d records: its RSS 5 s after it serves", p.JoinRecords),
		Value: float64(after) / (1 << 20), Unit: "MiB", N: int64(p.JoinRecords),
		Note: fmt.Sprintf("%d MiB when it began to serve", atServing>>20)}, scaleJoinRSSBound, le(1))
	return nil
}

// writeRecords writes n authority records of idle counters owned by owner,
// 16 requests of 100 puts in flight.
func writeRecords(x *run, ec *clientv3.Client, keys keyspace.Keys, owner record.OwnerRef, rid string, n int) error {
	const per = 100
	return inParallel((n+per-1)/per, 16, func(b int) error {
		ops := make([]clientv3.Op, 0, per)
		for i := b * per; i < min(b*per+per, n); i++ {
			obj := keyspace.Actor("counter", fmt.Sprintf("j%d", i))
			r := record.Record{Kind: obj.Kind, Type: obj.Type, ObjectGeneration: 1, AuthorityGeneration: 1, Owner: owner,
				Node: record.NodeRef{RoutingID: rid, Address: "127.0.0.1:1"}, State: record.StateActive}
			ops = append(ops, clientv3.OpPut(keys.Authority(obj), string(r.Encode())))
		}
		_, err := ec.Txn(x.ctx).Then(ops...).Commit()
		return err
	})
}
