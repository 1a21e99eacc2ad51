package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/internal/locationd"
	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The colocate section (issue 20): 1,000 pairs of bank objects that
// message each other, placed over three nodes by the placement rule (a hash
// of object and node: at random, about two pairs in three split); each
// pair exchanges one message first, so that every edge is known. Callers
// start chains of 16 messages on random pairs (chain TXID 1 B A B A …: each
// hop a message from one of the pair to the other, answered to its sender);
// messages per second is the count of messages answered, over every node,
// per second, in the best fifth of the window, and the cross-node share of
// the whole window those answered by
// another node than their sender's. Then one co-location rebalance (POST
// /v1/rebalance {"colocate":true} to a locationd started in this process,
// from the nodes' traffic sketches of the first window), then the same
// window again.

const (
	colocatePairs   = 1000 // unless Plan.Pairs
	colocateHops    = 16
	colocateCallers = 32
)

func (x *run) colocate() error {
	if x.cfg.TLS {
		x.step("colocate: skipped with --tls (its locationd runs plaintext)")
		return nil
	}
	w := x.cfg.Plan.Window
	npairs := x.cfg.Plan.Pairs
	if npairs <= 0 {
		npairs = colocatePairs
	}
	x.step("colocate: a third node, locationd, %d pairs of banks placed over n1, n2, n3", npairs)
	if err := x.m.startNode(x.ctx, "n3", x.cfg.Tune); err != nil {
		return err
	}
	ld, stop, err := x.m.startLocationd(x.ctx)
	if err != nil {
		return err
	}
	defer stop()
	pairs := make([][2]string, npairs)
	var wg sync.WaitGroup
	errs := make(chan error, npairs)
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				pairs[i] = [2]string{fmt.Sprintf("actor/bank/pp%04da", i), fmt.Sprintf("actor/bank/pp%04db", i)}
				for _, o := range pairs[i] {
					if _, err := x.m.direct.Call(x.ctx, o, "read"); err != nil {
						errs <- fmt.Errorf("bench: create %s: %w", o, err)
						return
					}
				}
				// Every pair talks once before the first window: the
				// sketches know every edge (as for traffic that recurs).
				if _, err := x.m.direct.Call(x.ctx, pairs[i][0], "chain", "warm", "1", pairs[i][1]); err != nil {
					errs <- fmt.Errorf("bench: first message of pair %d: %w", i, err)
					return
				}
			}
		})
	}
	for i := range pairs {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}

	x.step("colocate: messages/s of chains of %d messages on the pairs, %d callers, %s", colocateHops, colocateCallers, w)
	before, err := x.pairWindow(pairs, w, "before")
	if err != nil {
		return err
	}
	x.step("colocate: one co-location rebalance (budget %d)", api.MaxRebalanceBudget)
	rctx, cancel := context.WithTimeout(x.ctx, 10*time.Minute)
	t0 := time.Now()
	plan, _, err := ld.Rebalance(rctx, api.RebalanceRequest{Budget: api.MaxRebalanceBudget, Colocate: true})
	cancel()
	if err != nil {
		return fmt.Errorf("bench: co-location rebalance: %w", err)
	}
	took := time.Since(t0)
	planned := "no traffic"
	if t := plan.Traffic; t != nil {
		planned = fmt.Sprintf("planned %.1f%% → %.1f%% cross-node from %d nodes' sketches", 100*t.FractionBefore, 100*t.FractionAfter, t.Nodes)
	}
	note := fmt.Sprintf("%d moves (%d completed, %d failed) in %s; %s", len(plan.Moves), plan.Completed, plan.Failed, took.Round(time.Millisecond), planned)
	x.step("colocate: %s", note)
	after, err := x.pairWindow(pairs, w, "after")
	if err != nil {
		return err
	}
	baseName := fmt.Sprintf("messages/s, %d pairs placed at random over 3 nodes", npairs)
	x.base(Measure{Name: baseName, Value: before.rate, Unit: "/s", N: before.messages, Note: before.note()})
	x.base(Measure{Name: "cross-node messages, pairs placed at random", Value: 100 * before.cross, Unit: "%", N: before.messages})
	x.fig(Measure{Name: fmt.Sprintf("messages/s, %d pairs after one co-location rebalance", npairs), Value: after.rate, Unit: "/s", N: after.messages, Note: note},
		baseName, ge(1.5))
	x.fig(Measure{Name: "cross-node messages after one co-location rebalance", Value: 100 * after.cross, Unit: "%", N: after.messages},
		"cross-node messages, pairs placed at random", le(0.1))
	return nil
}

type pairFigures struct {
	rate            float64
	messages, local int64
	cross           float64
	chains, busy    int64
}

func (p pairFigures) note() string {
	return fmt.Sprintf("%d chains; %d calls refused for a full outbox", p.chains, p.busy)
}

// pairWindow runs the chain callers for d and counts the messages the
// nodes answered meanwhile; it waits first until no message of an earlier
// window is in flight.
func (x *run) pairWindow(pairs [][2]string, d time.Duration, label string) (pairFigures, error) {
	if err := x.m.quiesce(x.ctx, 60*time.Second); err != nil {
		return pairFigures{}, err
	}
	l0, r0 := x.m.delivered()
	var out pairFigures
	var mu sync.Mutex
	ctx, cancel := context.WithTimeout(x.ctx, d)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range colocateCallers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 20))
			var chains, busy int64
			for seq := 0; ctx.Err() == nil; seq++ {
				p := pairs[rng.IntN(len(pairs))]
				args := []string{fmt.Sprintf("%s-%d-%d", label, w, seq), "1"}
				for i := range colocateHops {
					args = append(args, p[(i+1)%2]) // b, a, b, …, a
				}
				_, err := x.m.direct.Call(ctx, p[0], "chain", args...)
				switch c := wire.CodeOf(err); {
				case err == nil:
					chains++
				case c == pb.Code_CODE_RESOURCE_EXHAUSTED || c == pb.Code_CODE_APPLICATION_ERROR:
					busy++ // its outbox is full, or a0 is out until its chains come home
					time.Sleep(time.Millisecond)
				}
			}
			mu.Lock()
			out.chains += chains
			out.busy += busy
			mu.Unlock()
		})
	}
	// The rate is the best of five slices of the window: a burst of load
	// from elsewhere on a shared machine then falls on one slice, not on
	// the figure (both windows are measured alike).
	slice := d / 5
	tick := time.NewTicker(slice)
	pl, pr, pt := l0, r0, start
	for ctx.Err() == nil {
		select {
		case <-tick.C:
			l, r := x.m.delivered()
			now := time.Now()
			if el := now.Sub(pt); el > slice/2 {
				out.rate = max(out.rate, float64((l-pl)+(r-pr))/el.Seconds())
			}
			pl, pr, pt = l, r, now
		case <-ctx.Done():
		}
	}
	tick.Stop()
	wg.Wait()
	el := time.Since(start)
	l1, r1 := x.m.delivered()
	out.local, out.messages = l1-l0, (l1-l0)+(r1-r0)
	if out.messages > 0 {
		out.cross = float64(r1-r0) / float64(out.messages)
		if out.rate == 0 {
			out.rate = float64(out.messages) / el.Seconds()
		}
	}
	x.step("colocate: %s: %d messages in %s (%.0f/s on average, %.0f/s in the best fifth), %.1f%% cross-node",
		label, out.messages, el.Round(time.Millisecond), float64(out.messages)/el.Seconds(), out.rate, 100*out.cross)
	return out, nil
}

// delivered is the messages answered so far on every hosting node, local
// (the destination served by the sender's node) and remote.
func (m *mesh) delivered() (local, remote int64) {
	for _, n := range []string{"n1", "n2", "n3"} {
		reg := m.metrics[n]
		if reg == nil {
			continue
		}
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() != "meshloc_messages_delivered_total" {
				continue
			}
			for _, s := range mf.GetMetric() {
				for _, lp := range s.GetLabel() {
					if lp.GetName() == "path" && lp.GetValue() == "local" {
						local += int64(s.GetCounter().GetValue())
					} else if lp.GetName() == "path" {
						remote += int64(s.GetCounter().GetValue())
					}
				}
			}
		}
	}
	return local, remote
}

// quiesce waits until no node's outboxes hold a message, up to within.
func (m *mesh) quiesce(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		depth := 0.0
		for _, reg := range m.metrics {
			mfs, _ := reg.Gather()
			for _, mf := range mfs {
				if mf.GetName() == "meshloc_outbox_messages" {
					for _, s := range mf.GetMetric() {
						depth += s.GetGauge().GetValue()
					}
				}
			}
		}
		if depth == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("bench: %v messages still in outboxes after %s", depth, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startLocationd runs a locationd over the mesh's etcd in this process
// (no embedded etcd of its own) and returns its client and its stop; tune,
// when given, changes its configuration (the recovery part's
// --recover-orphans).
func (m *mesh) startLocationd(ctx context.Context, tune ...func(*locationd.Config)) (*client.Admin, func(), error) {
	cfg := locationd.DefaultConfig()
	cfg.DataDir = filepath.Join(m.dir, "locationd")
	cfg.EtcdEndpoints = []string{m.etcd.Endpoint()}
	cfg.HTTP = "127.0.0.1:0"
	for _, f := range tune {
		f(&cfg)
	}
	srv, err := locationd.New(cfg, zerolog.Nop())
	if err != nil {
		return nil, nil, err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- srv.Run(rctx) }()
	stop := func() {
		cancel()
		<-done
		os.RemoveAll(cfg.DataDir)
	}
	select {
	case <-srv.Ready():
	case err := <-done:
		cancel()
		return nil, nil, fmt.Errorf("bench: locationd: %w", err)
	case <-time.After(30 * time.Second):
		stop()
		return nil, nil, errors.New("bench: locationd not ready after 30 s")
	}
	c, err := client.NewAdmin("http://"+srv.HTTPAddr(), nil)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return c, stop, nil
}
