package recovery_test

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/locationd/recovery"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
)

// orphanCluster is an etcd holding n counters activated on a ghost owner
// (a lease keeper, no node), two live owners hosting counters, and the
// ghost's lease.
type orphanCluster struct {
	cli    *clientv3.Client
	st     *authority.Store
	ghost  *lease.Keeper
	live   []*lease.Keeper
	before map[string]authority.Snapshot
}

// activateOn creates n counters owned by owner, 64 at a time.
func activateOn(tb testing.TB, st *authority.Store, owner authority.OwnerRef, prefix string, n int) map[string]authority.Snapshot {
	tb.Helper()
	ctx := context.Background()
	out := make(map[string]authority.Snapshot, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan int)
	errs := make(chan error, 64)
	for range 64 {
		wg.Go(func() {
			for i := range next {
				obj := keyspace.Actor("counter", fmt.Sprintf("%s%06d", prefix, i))
				res, err := st.Activate(ctx, authority.ActivateRequest{Object: obj, Owner: owner,
					Node: authority.NodeRef{RoutingID: strings.Repeat("ab", 16), Address: "127.0.0.1:1"}})
				if err != nil || !res.Won {
					select {
					case errs <- fmt.Errorf("activate %s: won=%v %v", obj, res.Won, err):
					default:
					}
					continue
				}
				mu.Lock()
				out[obj.String()] = res.Snapshot
				mu.Unlock()
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		tb.Fatal(err)
	default:
	}
	return out
}

func newOrphanCluster(tb testing.TB, n int) *orphanCluster {
	tb.Helper()
	srv := etcdtest.Single(tb)
	cli := etcdtest.Client(tb, srv.Endpoint())
	oc := &orphanCluster{cli: cli, st: authority.New(cli, keys)}
	oc.ghost = startOwner(tb, cli, "ghost")
	oc.live = []*lease.Keeper{startOwner(tb, cli, "live1", "counter"), startOwner(tb, cli, "live2", "counter")}
	oc.before = activateOn(tb, oc.st, ref(oc.ghost), "o", n)
	return oc
}

// BenchmarkRecoverOrphans measures the recovery controller alone: n
// orphans of one ghost owner whose lease is revoked, recovered onto two live
// owners (lease keepers: no node takes part). orphans/s counts from the
// revoke until the controller counts every one recovered. Run one size at a
// time, once:
//
//	go test -run '^$' -bench 'RecoverOrphans/n=20000' -benchtime 1x ./internal/locationd/recovery/
func BenchmarkRecoverOrphans(b *testing.B) {
	for _, n := range []int{20_000, 100_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				oc := newOrphanCluster(b, n)
				rec := start(b, oc.cli, "bench", func(c *recovery.Config) { c.Recover = true; c.Rate = benchRate })
				leads(b, oc.cli, rec, 30*time.Second)
				stopProfile := profileFrom(b)
				b.StartTimer()
				if err := oc.ghost.Close(context.Background()); err != nil { // revokes its lease
					b.Fatal(err)
				}
				took := waitFor(b, "every orphan recovered", time.Hour, func() error {
					if s := rec.c.Status(); s.Recovered < int64(n) {
						return fmt.Errorf("%d of %d recovered", s.Recovered, n)
					}
					return nil
				})
				b.StopTimer()
				stopProfile()
				b.ReportMetric(float64(n)/took.Seconds(), "orphans/s")
				b.ReportMetric(took.Seconds(), "s")
				rec.stop()
			}
		})
	}
}

// benchRate is the rate the benchmark runs at (MESHLOC_BENCH_RECOVERY_RATE,
// default the controller's default).
var benchRate = func() float64 {
	if r, err := strconv.ParseFloat(os.Getenv("MESHLOC_BENCH_RECOVERY_RATE"), 64); err == nil && r > 0 {
		return r
	}
	return recovery.DefaultRate
}()

// profileFrom starts a CPU profile of the recovery alone into the file
// MESHLOC_BENCH_CPUPROFILE names (none when unset); call its result to stop.
func profileFrom(tb testing.TB) func() {
	path := os.Getenv("MESHLOC_BENCH_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		tb.Fatal(err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}
