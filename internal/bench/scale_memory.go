package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/freeport"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// The scale section's memory part: a node child (meshnode's defaults) on
// a cluster of its own, its resident set with no object but one, then with
// p.Objects idle memory counters made by first calls (64 in flight), once
// idle: after its de-duplication window (60 s) its sweep dropped the
// activating calls' replies, and the Go runtime's periodic collection (at
// least every 2 minutes) and scavenger returned what they freed — so it
// waits p.Settle (130 s by default) before it reads. The figure is the
// growth per object, (idle − empty) / objects; a second figure is the
// whole process per object. The bound is the (2 KiB per object), a
// stated bound and not a measurement: it is named so.

// scaleIdleBound is the bound on the RSS per idle object.
const scaleIdleBound = "bound: RSS per idle memory object (stated, not measured)"

func (x *run) scaleMemory(p ScalePlan) error {
	m, done, err := x.scaleCluster("memory", nil)
	if err != nil {
		return err
	}
	defer done()
	ctx := x.ctx
	n1, cl, err := loneNode(ctx, m, "n1", "", p.NodeArgs...)
	if err != nil {
		return err
	}
	defer n1.kill()
	defer cl.Close()
	// The connections and code paths warm, then the empty node's size.
	if err := activateCounters(ctx, cl, "actor/counter/warm", 1, 1); err != nil {
		return err
	}
	if err := recSleep(ctx, 2*time.Second); err != nil {
		return err
	}
	empty, err := n1.rss()
	if err != nil {
		return err
	}
	x.step("scale: memory: n1 holds 1 object in %d MiB; activating %d counters", empty>>20, p.Objects)
	t0 := time.Now()
	if err := activateCounters(ctx, cl, "actor/counter/idle", p.Objects, 64); err != nil {
		return err
	}
	act := time.Since(t0)
	peak, _ := n1.rss()
	x.step("scale: memory: %d counters activated in %s (RSS %d MiB); idle for %s", p.Objects, act.Round(time.Millisecond), peak>>20, p.Settle)
	if err := recSleep(ctx, p.Settle); err != nil {
		return err
	}
	idle, err := n1.rss()
	if err != nil {
		return err
	}
	const kib = 1024.0
	x.base(Measure{Name: scaleIdleBound, Value: 2, Unit: "KiB", N: 1})
	x.fig(Measure{Name: fmt.Sprintf("RSS per idle memory object, %d on one node (growth over the node with none)", p.Objects),
		Value: float64(idle-empty) / float64(p.Objects) / kib, Unit: "KiB", N: int64(p.Objects),
		Note: fmt.Sprintf("RSS %d MiB with none, %d MiB idle with %d (%d MiB just after activating them, %s idle)", empty>>20, idle>>20, p.Objects, peak>>20, p.Settle)},
		scaleIdleBound, le(1))
	x.fig(Measure{Name: fmt.Sprintf("RSS per idle memory object, %d on one node (the whole process)", p.Objects),
		Value: float64(idle) / float64(p.Objects) / kib, Unit: "KiB", N: int64(p.Objects)}, scaleIdleBound, nil)
	return nil
}

// loneNode starts node child name on m's etcd (its HTTP API on web, ""
// for none; more flags in args), waits until it serves, and returns it
// with a client that calls through it.
func loneNode(ctx context.Context, m *mesh, name, web string, args ...string) (*child, *client.Client, error) {
	return loneNodeIn(ctx, m, keyspace.DefaultCluster, name, web, args...)
}

// loneNodeIn is loneNode in the given cluster of m's etcd (--cluster):
// nodes of different clusters know nothing of each other.
func loneNodeIn(ctx context.Context, m *mesh, cluster, name, web string, args ...string) (*child, *client.Client, error) {
	keys, err := keyspace.New(keyspace.DefaultPrefix, cluster)
	if err != nil {
		return nil, nil, err
	}
	lis, err := freeport.Addr()
	if err != nil {
		return nil, nil, err
	}
	args = append([]string{"--name", name, "--cluster", cluster, "--etcd-endpoints", m.etcd.Endpoint(), "--listen", lis, "--http", web, "--log-level", "warn"}, args...)
	n1, err := startChild(ctx, "node", nil, args...)
	if err != nil {
		return nil, nil, err
	}
	if err := waitServing(ctx, m.ec, keys, name, n1); err != nil {
		n1.kill()
		return nil, nil, err
	}
	cl, err := client.New(ctx, client.Config{Nodes: []string{lis}, Timeout: time.Minute})
	if err != nil {
		n1.kill()
		return nil, nil, err
	}
	return n1, cl, nil
}

// waitServing waits until name's owner key says serving (at most 5
// minutes: a node joining a million records loads them first).
func waitServing(ctx context.Context, ec *clientv3.Client, keys keyspace.Keys, name string, c *child) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		r, err := ec.Get(ctx, keys.Owner(name))
		if err == nil && len(r.Kvs) == 1 {
			var d struct {
				State string `json:"state"`
			}
			if json.Unmarshal(r.Kvs[0].Value, &d) == nil && d.State == "serving" {
				return nil
			}
		}
		select {
		case <-c.exited:
			return fmt.Errorf("bench: the node child %s exited: %v: %s", name, c.err, c.stderr())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the node child %s does not serve: %s", name, c.stderr())
		}
		if err := recSleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}
