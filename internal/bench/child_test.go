package bench

import (
	"context"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/embedetcd"
	"github.com/meshloc/meshloc/internal/freeport"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// TestMain lets the bench start this test binary again as a child process.
func TestMain(m *testing.M) {
	MaybeChild()
	os.Exit(m.Run())
}

// TestChildProcesses starts an etcd child and a node child of it, reads
// the node's CPU and RSS, sees its owner key, and kills it as a crash
// would: its key outlives it until its lease ends.
func TestChildProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	ctx := context.Background()
	cu, _ := freeport.Addr()
	pu, _ := freeport.Addr()
	e, err := startChild(ctx, "etcd", embedetcd.Config{Name: "child", Dir: t.TempDir(), ClientURL: "http://" + cu, PeerURL: "http://" + pu, LogLevel: "fatal"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.stop(10 * time.Second)
	ec, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + cu}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	lis, _ := freeport.Addr()
	n, err := startChild(ctx, "node", nil, "--name", "c1", "--etcd-endpoints", "http://"+cu, "--listen", lis, "--http", "", "--log-level", "warn")
	if err != nil {
		t.Fatal(err)
	}
	key := keyspace.Default().Owner("c1")
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := ec.Get(ctx, key)
		if err == nil && len(r.Kvs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			n.kill()
			t.Fatalf("the node child never wrote %s: %s", key, n.stderr())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, p := range []*child{e, n} {
		cpu, err1 := p.cpu()
		rss, err2 := p.rss()
		if err1 != nil || err2 != nil || rss <= 0 || cpu < 0 {
			t.Fatalf("child %d: cpu %v (%v), rss %d (%v)", p.pid(), cpu, err1, rss, err2)
		}
	}
	n.kill()
	if r, err := ec.Get(ctx, key); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("the owner key of a killed node went at once: %v %v", r, err)
	}
}
