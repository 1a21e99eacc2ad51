package locationd

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
)

// stormNode starts a node for a storm: a lease of 5 s (the storm keeps both
// cores busy), relocations at once.
func stormNode(t *testing.T, ep, name string) *node.Node {
	t.Helper()
	reg := actor.NewRegistry()
	if err := builtin.Register(reg); err != nil {
		t.Fatal(err)
	}
	cfg := node.DefaultConfig()
	cfg.Name, cfg.EtcdEndpoints, cfg.Listen, cfg.HTTP = name, []string{ep}, "127.0.0.1:0", ""
	cfg.LeaseTTL = 5 * time.Second
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(cfg, node.WithRegistry(reg), node.WithListener(lis), node.WithMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Stop(sctx)
	})
	return n
}

// The embedded etcd, given a quota of 8 MiB, survives a storm of real
// relocations between two nodes that writes five times its quota: no
// alarm, no relocation refused for space, the file under its quota; the
// history went by compaction under pressure (the retention, a minute,
// would have kept it all). A relocation costs etcd's file about 2 KB until
// compacted (its record written twice, its relocations/<id> key put and
// deleted; measured with compaction off: +57.7 MB for 29,643
// relocations), so the storm makes 5 × 8 MiB / 2 KB of them.
func TestEtcdStormSmallQuota(t *testing.T) {
	if testing.Short() {
		t.Skip("a relocation storm of a few tens of seconds")
	}
	const quota = 8 << 20
	const perRelocation = 2000 // bytes of etcd's file, uncompacted (above)
	r := start(t, func(c *Config) { c.EtcdQuotaBytes = quota })
	ep := r.srv.EtcdEndpoints()[0]
	nodes := map[string]*node.Node{"n1": stormNode(t, ep, "n1"), "n2": stormNode(t, ep, "n2")}
	cli := r.etcd(t)
	ctx := context.Background()
	c, err := client.New(ctx, client.Config{Nodes: []string{nodes["n1"].Address()}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const workers, each = 16, 2
	at := make([]string, workers*each) // where each object is
	for i := range at {
		rep, err := c.Call(ctx, fmt.Sprintf("actor/counter/storm-%d", i), "add", "1")
		if err != nil {
			t.Fatal(err)
		}
		at[i] = rep.Node
	}
	first, err := cli.Get(ctx, "/none", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	const relocations = 5 * quota / perRelocation

	sctx, stop := context.WithCancel(ctx)
	var moved, other atomic.Int64
	var mu sync.Mutex
	var refused []string
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for k := 0; sctx.Err() == nil; k++ {
				i := w*each + k%each
				to := map[string]string{"n1": "n2", "n2": "n1"}[at[i]]
				st, err := nodes[at[i]].Relocate(sctx, fmt.Sprintf("actor/counter/storm-%d", i), node.RelocateOptions{Target: to, Foreground: true})
				switch {
				case err != nil:
					other.Add(1)
				case st.GetOutcome() == "completed":
					at[i] = to
					moved.Add(1)
				default:
					other.Add(1)
					if m := st.GetMessage(); strings.Contains(m, "NOSPACE") || strings.Contains(m, "space") {
						mu.Lock()
						refused = append(refused, m)
						mu.Unlock()
					}
				}
			}
		})
	}
	// The storm ends after its relocations, or when they stop completing
	// (every one refused: what this checks against; or a machine too busy
	// to move any: then the test fails below, saying how far it got).
	var maxFile int64
	deadline := time.Now().Add(5 * time.Minute)
	for moved.Load() < relocations && time.Now().Before(deadline) {
		var st api.EtcdStatus
		if _, _, body := rawGet(t, "GET", r.base+"/v1/etcd"); json.Unmarshal(body, &st) == nil && len(st.Members) == 1 {
			maxFile = max(maxFile, st.Members[0].DBSize)
			if len(st.Alarms) > 0 {
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	stop()
	wg.Wait()

	last, err := cli.Get(ctx, "/none", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	alarms, err := cli.AlarmList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(alarms.Alarms) > 0 || len(refused) > 0 {
		t.Fatalf("after %d relocations: alarms %v; relocations refused for space: %d (%v)", moved.Load(), alarms.Alarms, len(refused), refused[:min(3, len(refused))])
	}
	if moved.Load() < relocations {
		t.Fatalf("%d relocations completed in 5 minutes (%d did not), want %d", moved.Load(), other.Load(), relocations)
	}
	var st api.EtcdStatus
	_, _, body := rawGet(t, "GET", r.base+"/v1/etcd")
	if err := json.Unmarshal(body, &st); err != nil || len(st.Members) != 1 {
		t.Fatalf("/v1/etcd: %s", body)
	}
	m := st.Members[0]
	if maxFile >= quota || m.DBSize >= quota || st.Compaction.PressureCompactions == 0 {
		t.Errorf("after the storm (the file at most %d bytes): %s: want a file under the quota and compactions under pressure", maxFile, body)
	}
	if status, _, body := rawGet(t, "GET", r.base+"/readyz"); status != 200 {
		t.Errorf("/readyz after the storm: %d %s", status, body)
	}
	t.Logf("%d relocations (%d not completed), %d revisions, under a %d MiB quota: the file at most %d bytes, now %d (%d in use); %d compactions (%d under pressure), %d defragmentations",
		moved.Load(), other.Load(), last.Header.Revision-first.Header.Revision, quota>>20, maxFile, m.DBSize, m.DBSizeInUse,
		st.Compaction.Compactions, st.Compaction.PressureCompactions, st.Compaction.Defrags)
}
