package node_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/node"
)

// A node whose watch path never shows it its own "serving" descriptor (its
// --etcd-watch-endpoints lead nowhere) does not start: placement on it
// would find no serving node. Start fails, saying why, instead of serving
// or waiting for ever.
func TestStartNeedsToSeeItselfServing(t *testing.T) {
	srv := etcdtest.Single(t)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // nothing listens there now
	cfg := node.DefaultConfig()
	cfg.Name, cfg.Listen, cfg.HTTP = "n1", "127.0.0.1:0", ""
	cfg.EtcdEndpoints = []string{srv.Endpoint()}
	cfg.EtcdWatchEndpoints = []string{"http://" + deadAddr}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nd, err := node.New(cfg, node.WithRegistry(registry(t)), node.WithListener(lis), node.WithMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = nd.Start(ctx)
	if err == nil {
		sctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
		defer stop()
		_ = nd.Stop(sctx)
		t.Fatal("a node that never saw itself serving started")
	}
	if !strings.Contains(err.Error(), "did not show it serving") {
		t.Fatalf("Start: %v; want it to say the directory did not show it serving", err)
	}
}
