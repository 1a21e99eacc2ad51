package authority_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/embedetcd"
	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// BenchmarkCacheLoad is a joining node's first load: a cache that lists
// MESHLOC_CACHE_LOAD_RECORDS records (100,000 by default; the issue's
// figure is a million) from a real etcd, from its start to Ready, and the
// heap it then holds.
//
//	MESHLOC_CACHE_LOAD_RECORDS=1000000 go test -run '^$' -bench BenchmarkCacheLoad -benchtime=1x ./pkg/authority/
func BenchmarkCacheLoad(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("MESHLOC_CACHE_LOAD_RECORDS")); err == nil && v > 0 {
		n = v
	}
	srv := etcdtest.SingleWith(b, func(c *embedetcd.Config) { c.QuotaBytes = 8 << 30 })
	c := etcdtest.Client(b, srv.Endpoint())
	ctx := context.Background()
	owner := authority.OwnerRef{ID: "holder", Generation: 7}
	node := authority.NodeRef{RoutingID: "00112233445566778899aabbccddeeff", Address: "127.0.0.1:1"}
	const per = 100
	for start := 0; start < n; start += per {
		ops := make([]clientv3.Op, 0, per)
		for i := start; i < min(start+per, n); i++ {
			obj := keyspace.Actor("counter", fmt.Sprintf("j%d", i))
			r := authority.Record{Kind: obj.Kind, Type: obj.Type, ObjectGeneration: 1, AuthorityGeneration: 1,
				Owner: owner, Node: node, State: authority.StateActive}
			ops = append(ops, clientv3.OpPut(keys.Authority(obj), string(r.Encode())))
		}
		if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	var took time.Duration
	var held float64
	for b.Loop() {
		before := heapInuse()
		cache := authority.NewCache(c, keys)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		t0 := time.Now()
		go func() { defer close(done); _ = cache.Run(rctx) }()
		<-cache.Ready()
		took = time.Since(t0)
		held = float64(heapInuse()) - float64(before)
		if cache.Len() != n {
			b.Fatalf("cache holds %d records, want %d", cache.Len(), n)
		}
		cancel()
		<-done
		runtime.KeepAlive(cache)
	}
	b.ReportMetric(took.Seconds(), "load-s")
	b.ReportMetric(float64(n)/took.Seconds(), "records/s")
	b.ReportMetric(held/float64(n), "cache-B/object")
}
