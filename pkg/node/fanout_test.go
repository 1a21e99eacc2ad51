package node_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/fanout"
	"github.com/meshloc/meshloc/internal/tcpproxy"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// startFanout serves a watch fan-out of the default cluster's records in
// front of etcd c; it returns its address.
func startFanout(t *testing.T, c *clientv3.Client) string {
	t.Helper()
	keys := keyspace.Default()
	hub, err := fanout.New(c, fanout.Options{Ranges: []fanout.Range{
		fanout.Prefix(keys.AuthorityPrefix()), fanout.Prefix(keys.OwnersPrefix())}}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	hub.Register(g)
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.Serve(lis) })
	t.Cleanup(func() { g.Stop(); wg.Wait(); hub.Close() })
	return lis.Addr().String()
}

// etcdWatchers is etcd's own count of the watchers it serves (the
// embedded member of this test process).
func etcdWatchers(t *testing.T) float64 {
	t.Helper()
	return gatherSum(t, prometheus.DefaultGatherer, "etcd_debugging_mvcc_watcher_total", nil)
}

// docs/design.md §5: nodes whose location caches and owner directories
// follow etcd through a watch fan-out see every record change: relocations
// complete and every node's cache holds each one's commit. etcd serves the
// same number of watchers for three nodes as for six. A gateway takes an
// owner's reply while its cache is fresh; when the fan-out stops delivering
// (cut off from the gateway, which still reaches etcd itself), its cache
// goes stale after the TTL and replies are refused, as when the gateway
// loses etcd (TestGatewayRefusesRepliesWhileCacheStale); back in touch,
// they are accepted again.
func TestNodesFollowEtcdThroughAFanout(t *testing.T) {
	srv := etcdtest.Single(t)
	m := &mesh{etcd: etcdtest.Client(t, srv.Endpoint()), ep: srv.Endpoint()}
	px, err := tcpproxy.New("127.0.0.1:0", startFanout(t, m.etcd))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	via := func(_ int, c *node.Config) { c.EtcdWatchEndpoints = []string{"http://" + px.Addr()} }
	base := etcdWatchers(t)
	n1 := m.add(t, "n1", via)
	n2 := m.add(t, "n2", via)
	gw := m.add(t, "gw", via, func(_ int, c *node.Config) {
		c.Weight = 0 // a pure gateway
		c.LeaseTTL = 2 * time.Second
	})
	t.Cleanup(func() { px.SetMode(tcpproxy.Forward); px.ResetConns() })

	c := newClient(t, client.Config{Nodes: []string{n1.Address()}})
	ctx := context.Background()
	var objs []string
	for i := range 12 {
		obj := fmt.Sprintf("actor/counter/f%d", i)
		if _, err := c.Call(ctx, obj, "add", "1"); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, obj)
	}
	for round := range 2 {
		for i, obj := range objs {
			m.moveTo(t, obj, []*node.Node{n1, n2}[(i+round)%2])
		}
	}
	// Every node's cache reaches each object's last commit.
	for _, obj := range objs {
		o, _ := keyspace.ParseObject(obj)
		snap, err := authority.New(m.etcd, keyspace.Default()).Read(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range m.nodes {
			for deadline := time.Now().Add(30 * time.Second); n.CachedVersion(obj) != snap.StoreVersion; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s's cache holds %s at %d, etcd at %d", n.Self().ID, obj, n.CachedVersion(obj), snap.StoreVersion)
				}
			}
		}
	}
	three := etcdWatchers(t) - base
	for i := range 3 {
		m.add(t, fmt.Sprintf("n%d", i+3), via)
	}
	if six := etcdWatchers(t) - base; six != three {
		t.Fatalf("etcd serves %v watchers for six nodes through the fan-out, %v for three", six, three)
	}

	call := func() *pb.CallReply {
		op := wire.NewOperationID()
		return gw.Call(ctx, &pb.CallRequest{Version: wire.Version, Object: objs[0], Method: "get", OperationId: op[:]})
	}
	if rep := call(); rep.GetCode() != pb.Code_CODE_OK {
		t.Fatalf("through a fresh gateway: %v %s", rep.GetCode(), rep.GetMessage())
	}
	px.SetMode(tcpproxy.Blackhole)
	time.Sleep(2500 * time.Millisecond) // past the TTL without news through the fan-out
	rep := call()
	if rep.GetCode() != pb.Code_CODE_UNAVAILABLE || !strings.Contains(rep.GetMessage(), "not known fresh") {
		t.Fatalf("through a gateway whose fan-out is silent: %v %s, want unavailable (cache not known fresh)", rep.GetCode(), rep.GetMessage())
	}
	px.SetMode(tcpproxy.Forward)
	px.ResetConns()
	deadline := time.Now().Add(30 * time.Second)
	for rep = call(); rep.GetCode() != pb.Code_CODE_OK; rep = call() {
		if time.Now().After(deadline) {
			t.Fatalf("gateway's fan-out back: %v %s", rep.GetCode(), rep.GetMessage())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
