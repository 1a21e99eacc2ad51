package etcdauth_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/meshloc/meshloc/internal/embedetcd"
	"github.com/meshloc/meshloc/internal/etcdauth"
	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/mtls"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// An embedded etcd with client TLS and certificate authentication: after
// Setup, the node's etcd user reads and writes the cluster's prefix and
// nothing else, root writes anywhere, and a second Setup changes nothing.
func TestSetupLimitsUsersToThePrefix(t *testing.T) {
	dir := t.TempDir()
	if _, err := mtls.Init(dir, mtls.InitOptions{Locationd: []string{"l1"}, Nodes: []string{"n1"}}); err != nil {
		t.Fatal(err)
	}
	f := func(n string) string { return filepath.Join(dir, n) }
	url := fmt.Sprintf("https://127.0.0.1:%d", etcdtest.FreePort(t))
	srv, err := embedetcd.Start(context.Background(), embedetcd.Config{Dir: t.TempDir(), ClientURL: url,
		PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t)),
		ClientTLS: &embedetcd.TLSFiles{Cert: f("l1.crt"), Key: f("l1.key"), CA: f("ca.crt")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	client := func(user string) *clientv3.Client {
		cfg, err := mtls.Etcd{Endpoints: []string{url}, CACert: f("ca.crt"), Cert: f(user + ".crt"), Key: f(user + ".key")}.ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		c, err := clientv3.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys := keyspace.Default()
	loc := client("etcd-locationd")
	if enabled, err := etcdauth.Setup(ctx, loc, keys); err != nil || !enabled {
		t.Fatalf("setup: %v %v", enabled, err)
	}
	node, root := client("etcd-node"), client("etcd-root")
	if _, err := node.Put(ctx, keys.Base()+"x", "1"); err != nil {
		t.Fatalf("node writing its prefix: %v", err)
	}
	if _, err := node.Get(ctx, keys.Base(), clientv3.WithPrefix()); err != nil {
		t.Fatalf("node reading its prefix: %v", err)
	}
	for _, k := range []string{"/other", "/meshloc/otherclusterx/y", keys.Base()[:len(keys.Base())-1]} {
		if _, err := node.Put(ctx, k, "1"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("node writing %s: %v, want permission denied", k, err)
		}
	}
	if _, err := loc.Put(ctx, "/other", "1"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("locationd writing outside its prefix: %v, want permission denied", err)
	}
	if _, err := root.Put(ctx, "/other", "1"); err != nil {
		t.Fatalf("root: %v", err)
	}
	if enabled, err := etcdauth.Setup(ctx, loc, keys); err != nil || enabled {
		t.Fatalf("second setup: %v %v, want nothing done", enabled, err)
	}
	// A lease and an election key, as nodes and locationd use them.
	g, err := node.Grant(ctx, 5)
	if err != nil {
		t.Fatalf("node granting a lease: %v", err)
	}
	if _, err := node.Put(ctx, keys.Owner("n1"), "{}", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := node.Revoke(ctx, g.ID); err != nil {
		t.Fatalf("node revoking its lease: %v", err)
	}
}
