package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/tcpproxy"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// docs/design.md §5: a gateway accepts an owner's reply only while its location
// cache is known fresh (etcd confirmed its watch within the lease TTL), so a
// fresh cache holds any fence that would make a woken, superseded owner's
// reply stale. A gateway cut off from etcd keeps routing, but after a TTL
// without news it refuses the owners' replies (unavailable: the caller
// retries with the same operation id); back in touch, it accepts them again.
func TestGatewayRefusesRepliesWhileCacheStale(t *testing.T) {
	srv := etcdtest.Single(t)
	m := &mesh{etcd: etcdtest.Client(t, srv.Endpoint()), ep: srv.Endpoint()}
	px, err := tcpproxy.New("127.0.0.1:0", strings.TrimPrefix(srv.Endpoint(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	owner := m.add(t, "n1")
	gw := m.add(t, "gw", func(_ int, c *node.Config) {
		c.EtcdEndpoints = []string{"http://" + px.Addr()}
		c.Weight = 0 // a pure gateway
		c.LeaseTTL = 2 * time.Second
	})
	t.Cleanup(func() { px.SetMode(tcpproxy.Forward); px.ResetConns() })
	c := newClient(t, client.Config{Nodes: []string{owner.Address()}})
	if _, err := c.Call(context.Background(), "actor/counter/f", "add", "1"); err != nil {
		t.Fatal(err)
	}
	call := func() *pb.CallReply {
		op := wire.NewOperationID()
		return gw.Call(context.Background(), &pb.CallRequest{Version: wire.Version, Object: "actor/counter/f", Method: "get", OperationId: op[:]})
	}
	if rep := call(); rep.GetCode() != pb.Code_CODE_OK {
		t.Fatalf("through a fresh gateway: %v %s", rep.GetCode(), rep.GetMessage())
	}
	px.SetMode(tcpproxy.Blackhole)
	time.Sleep(2500 * time.Millisecond) // past the TTL without news from etcd
	rep := call()
	if rep.GetCode() != pb.Code_CODE_UNAVAILABLE || !strings.Contains(rep.GetMessage(), "not known fresh") {
		t.Fatalf("through a stale gateway: %v %s, want unavailable (cache not known fresh)", rep.GetCode(), rep.GetMessage())
	}
	px.SetMode(tcpproxy.Forward)
	px.ResetConns()
	deadline := time.Now().Add(20 * time.Second)
	for rep = call(); rep.GetCode() != pb.Code_CODE_OK; rep = call() {
		if time.Now().After(deadline) {
			t.Fatalf("gateway back in touch with etcd: %v %s", rep.GetCode(), rep.GetMessage())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
