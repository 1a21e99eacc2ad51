package authority_test

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/bench/baseline"
	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// BenchmarkDeleteObjects deletes 20,000 records, each with a state and a
// persisted reply, 64 in flight through a batched Store (as locationd's
// DELETE /v1/objects runs them), beside etcd's CAS/s with 64 clients on
// the same embedded etcd, and reports both and their ratio (the lifecycle
// section's deletes figure, without the processes around it). The work
// does not scale with b.N; MESHLOC_DELETE_PROFILE writes a CPU profile of
// the deletes:
//
//	go test -run '^$' -bench BenchmarkDeleteObjects -benchtime 1x ./pkg/authority/
func BenchmarkDeleteObjects(b *testing.B) {
	const count, inFlight = 20_000, 64
	c := etcdtest.Client(b, etcdtest.Single(b).Endpoint())
	st := authority.New(c, keys)
	ctx := context.Background()
	g, err := c.Grant(ctx, 600)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Put(ctx, keys.Owner("a"), `{"ownerId":"a"}`, clientv3.WithLease(g.ID)); err != nil {
		b.Fatal(err)
	}
	r, err := c.Get(ctx, keys.Owner("a"))
	if err != nil {
		b.Fatal(err)
	}
	a := authority.OwnerRef{ID: "a", Generation: r.Kvs[0].CreateRevision}
	objs := make([]keyspace.Object, count)
	for i := range objs {
		objs[i] = keyspace.Actor("dcounter", fmt.Sprintf("d%d", i))
	}
	parallel := func(f func(keyspace.Object) error) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range inFlight {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < count; i = next.Add(1) - 1 {
					if err := f(objs[i]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	for range b.N {
		parallel(func(o keyspace.Object) error {
			if _, err := st.Activate(ctx, authority.ActivateRequest{Object: o, Owner: a, Node: node("a")}); err != nil {
				return err
			}
			_, err := c.Txn(ctx).Then(clientv3.OpPut(keys.State(o), `{"state":"e30="}`),
				clientv3.OpPut(keys.StateReplies(o)+"0123456789abcdef0123456789abcdef", `{"code":1}`)).Commit()
			return err
		})
		ok, el, err := baseline.CASRate(ctx, c, "/bench/cas", inFlight, 3*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		del := st.Batched(authority.DefaultLimits())
		stop := func() {}
		if p := os.Getenv("MESHLOC_DELETE_PROFILE"); p != "" {
			f, err := os.Create(p)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				b.Fatal(err)
			}
			stop = func() { pprof.StopCPUProfile(); f.Close() }
		}
		t0 := time.Now()
		parallel(func(o keyspace.Object) error { _, _, err := del.DeleteObject(ctx, o); return err })
		took := time.Since(t0)
		stop()
		cas, dels := float64(ok)/el.Seconds(), count/took.Seconds()
		bs := del.BatchStats()
		b.ReportMetric(cas, "cas/s")
		b.ReportMetric(dels, "deletes/s")
		b.ReportMetric(dels/cas, "ratio")
		b.ReportMetric(float64(bs.Writes)/float64(max(bs.Requests, 1)), "writes/request")
		b.ReportMetric(float64(bs.Reads)/float64(max(bs.ReadRequests, 1)), "reads/request")
	}
}
