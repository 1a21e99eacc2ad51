package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshloc/meshloc/internal/bench/baseline"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/freeport"
	"github.com/meshloc/meshloc/internal/locationd"
	"github.com/meshloc/meshloc/internal/locationd/recovery"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// The scale section's recovery part: a node child n1 holds p.Objects idle
// memory counters (activated through it by first calls, 64 in flight) and
// is killed -9; two in-process nodes n2 and n3 live on, and an in-process
// locationd runs the recovery controller (--recover-orphans, default
// --recovery-rate). The figure is the objects recovered per second from
// the moment etcd expired n1's lease (its owner key's deletion, as a watch
// sees it) until the last orphan's record names a live node (every
// recovery writes its record once, so a watch counting the records'
// writes since the kill says when); beside it the etcd CAS rate at 64
// clients on the same etcd, measured after the recovery. The time from the
// kill (the lease TTL, 5 s, plus the recovery) is in the note, with the
// first-call activation rate.

// scaleRecoveryCASName is the recovery part's baseline: its own cluster's
// CAS rate.
const scaleRecoveryCASName = "etcd CAS/s, 64 clients, the recovery part's etcd"

func (x *run) scaleRecovery(p ScalePlan) error {
	m, done, err := x.scaleCluster("recovery", nil)
	if err != nil {
		return err
	}
	defer done()
	ctx := x.ctx
	ep := m.etcd.Endpoint()
	keys := keyspace.Default()
	lis, err := freeport.Addr()
	if err != nil {
		return err
	}
	x.step("scale: recovery: node child n1; %d counters activated through it by first calls, 64 in flight", p.Objects)
	n1, err := startChild(ctx, "node", nil, "--name", "n1", "--etcd-endpoints", ep, "--listen", lis, "--http", "", "--log-level", "warn")
	if err != nil {
		return err
	}
	defer n1.kill()
	if err := recWaitOwner(ctx, m.ec, keys.Owner("n1"), n1); err != nil {
		return err
	}
	cl, err := client.New(ctx, client.Config{Nodes: []string{lis}, Timeout: time.Minute})
	if err != nil {
		return err
	}
	defer cl.Close()
	t0 := time.Now()
	if err := activateCounters(ctx, cl, "actor/counter/rc", p.Objects, 64); err != nil {
		return err
	}
	act := time.Since(t0)
	actRate := float64(p.Objects) / act.Seconds()
	x.step("scale: recovery: activated %d counters on n1 in %s: %.0f objects/s", p.Objects, act.Round(time.Millisecond), actRate)

	x.step("scale: recovery: nodes n2 and n3, a locationd recovering orphans (default --recovery-rate %d/s)", recovery.DefaultRate)
	for _, name := range []string{"n2", "n3"} {
		if err := m.startNode(ctx, name, defaultFlags); err != nil {
			return err
		}
	}
	_, stop, err := m.startLocationd(ctx, func(c *locationd.Config) { c.RecoverOrphans = true })
	if err != nil {
		return err
	}
	defer stop()
	if err := recWaitLeader(ctx, m.ec, keys); err != nil {
		return err
	}

	head, err := m.ec.Get(ctx, keys.Owner("n1"))
	if err != nil || len(head.Kvs) != 1 {
		return fmt.Errorf("bench: n1's owner key before the kill: %v", err)
	}
	w := recWatch(ctx, m.ec, keys, head.Header.Revision+1, p.Objects)
	defer w.stop()
	x.step("scale: recovery: kill -9 of n1")
	killed := time.Now()
	n1.kill()
	var expired, finished time.Time
	select {
	case expired = <-w.expired:
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("bench: n1's lease did not expire within 2 min of its kill")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case finished = <-w.done:
	case err := <-w.err:
		return err
	case <-time.After(30 * time.Minute):
		return fmt.Errorf("bench: %d of %d orphans recovered after 30 min", w.recovered.Load(), p.Objects)
	case <-ctx.Done():
		return ctx.Err()
	}
	took := finished.Sub(expired)
	rate := float64(p.Objects) / took.Seconds()
	x.step("scale: recovery: lease expired %s after the kill; %d orphans recovered %s later: %.0f objects/s",
		expired.Sub(killed).Round(time.Millisecond), p.Objects, took.Round(time.Millisecond), rate)
	if err := recCheck(ctx, m.ec, keys, p.Objects); err != nil {
		return err
	}

	x.step("scale: recovery: etcd CAS/s with 64 clients on the same etcd, %s", x.cfg.Plan.Window)
	ok, el, err := baseline.CASRate(ctx, m.ec, "/bench/scale-recovery-cas", 64, x.cfg.Plan.Window)
	if err != nil {
		return err
	}
	x.base(Measure{Name: scaleRecoveryCASName, Value: float64(ok) / el.Seconds(), Unit: "/s", N: ok})
	x.fig(Measure{Name: fmt.Sprintf("recovery of %d orphans after kill -9, objects/s", p.Objects), Value: rate, Unit: "/s", N: int64(p.Objects),
		Note: fmt.Sprintf("from the lease's expiry (%s after the kill; %s from the kill to the last recovery); default --recovery-rate %d/s; first-call activation of the %d through n1, 64 in flight: %.0f objects/s",
			expired.Sub(killed).Round(time.Millisecond), finished.Sub(killed).Round(time.Millisecond), recovery.DefaultRate, p.Objects, actRate)},
		scaleRecoveryCASName, ge(0.5))
	return nil
}

// recWaitOwner waits until key (a node child's owner key) exists.
func recWaitOwner(ctx context.Context, ec *clientv3.Client, key string, c *child) error {
	deadline := time.Now().Add(time.Minute)
	for {
		r, err := ec.Get(ctx, key)
		if err == nil && len(r.Kvs) == 1 {
			return nil
		}
		select {
		case <-c.exited:
			return fmt.Errorf("bench: the node child exited: %v: %s", c.err, c.stderr())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the node child never wrote %s: %s", key, c.stderr())
		}
		if err := recSleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// recWaitLeader waits until a recovery controller that recovers leads.
func recWaitLeader(ctx context.Context, ec *clientv3.Client, keys keyspace.Keys) error {
	deadline := time.Now().Add(time.Minute)
	for {
		l, found, err := recovery.ReadLeader(ctx, ec, keys)
		if err == nil && found && l.Info.RecoverOrphans && l.Info.SinceUnixMs > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: no recovery controller leads after 1 min (%+v %v)", l, err)
		}
		if err := recSleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

func recSleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// recoveryWatch follows, from one revision on, n1's owner key (expired:
// when etcd deleted it) and every write of a record (done: when n of them
// were seen; after n1's kill each is a recovery).
type recoveryWatch struct {
	expired   chan time.Time
	done      chan time.Time
	err       chan error
	recovered atomic.Int64
	stop      func()
}

func recWatch(ctx context.Context, ec *clientv3.Client, keys keyspace.Keys, from int64, n int) *recoveryWatch {
	w := &recoveryWatch{expired: make(chan time.Time, 1), done: make(chan time.Time, 1), err: make(chan error, 1)}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for resp := range ec.Watch(wctx, keys.Owner("n1"), clientv3.WithRev(from)) {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					w.expired <- time.Now()
					return
				}
			}
		}
	})
	wg.Go(func() {
		for resp := range ec.Watch(wctx, keys.AuthorityPrefix(), clientv3.WithPrefix(), clientv3.WithRev(from)) {
			if err := resp.Err(); err != nil {
				w.err <- fmt.Errorf("bench: recovery watch: %w", err)
				return
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut && w.recovered.Add(1) == int64(n) {
					w.done <- time.Now()
					return
				}
			}
		}
	})
	w.stop = func() { cancel(); wg.Wait() }
	return w
}

// recCheck checks that every record names n2 or n3 at object
// generation 2: each of n1's objects recovered once, none lost.
func recCheck(ctx context.Context, ec *clientv3.Client, keys keyspace.Keys, n int) error {
	snaps, _, err := authority.New(ec, keys).List(ctx, authority.ListOptions{})
	if err != nil {
		return err
	}
	if len(snaps) != n {
		return fmt.Errorf("bench: %d records after the recovery, want %d", len(snaps), n)
	}
	for _, s := range snaps {
		if (s.Record.Owner.ID != "n2" && s.Record.Owner.ID != "n3") || s.Record.ObjectGeneration != 2 {
			return fmt.Errorf("bench: %s after the recovery: owner %s, object generation %d", s.Object, s.Record.Owner, s.Record.ObjectGeneration)
		}
	}
	return nil
}
