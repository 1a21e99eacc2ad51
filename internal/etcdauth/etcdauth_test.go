package etcdauth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/meshloc/meshloc/internal/etcdauth"
	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/mtls"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// An embedded etcd with client TLS and certificate authentication: after
// Setup, a node's etcd user reads the cluster's prefix, writes its shared
// ranges and its own owner key, and nothing else (not another node's owner
// key, not the controllers'), the watch fan-out's user reads (and watches) the records
// and owners and nothing else, root writes anywhere, and a second Setup
// changes nothing.
func TestSetupLimitsUsersToThePrefix(t *testing.T) {
	dir := t.TempDir()
	if _, err := mtls.Init(dir, mtls.InitOptions{Locationd: []string{"l1"}, Nodes: []string{"n1", "n2"}}); err != nil {
		t.Fatal(err)
	}
	_, client := etcdtest.Secured(t, dir, "l1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys := keyspace.Default()
	loc := client("etcd-locationd")
	if _, err := etcdauth.Setup(ctx, loc, keys, []string{"bad/name"}); !errors.Is(err, etcdauth.ErrInvalidNode) {
		t.Fatalf("setup with a bad node name: %v, want ErrInvalidNode", err)
	}
	if enabled, err := etcdauth.Setup(ctx, loc, keys, []string{"n1"}); err != nil || !enabled {
		t.Fatalf("setup: %v %v", enabled, err)
	}
	node, root := client("etcd-node-n1"), client("etcd-root")
	obj := keyspace.Actor("counter", "c1")
	for _, k := range []string{keys.Authority(obj), keys.Catalog(obj), keys.State(obj), keys.Relocation("r1"), keys.Owner("n1")} {
		if _, err := node.Put(ctx, k, "1"); err != nil {
			t.Fatalf("node n1 writing %s: %v", k, err)
		}
	}
	if _, err := node.Get(ctx, keys.Base(), clientv3.WithPrefix()); err != nil {
		t.Fatalf("node reading its prefix: %v", err)
	}
	for _, k := range []string{"/other", "/meshloc/otherclusterx/y", keys.Base()[:len(keys.Base())-1], keys.Base() + "x",
		keys.Owner("n2"), keys.Owner("n1x"), keys.Controller("recovery") + "/1"} {
		if _, err := node.Put(ctx, k, "1"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("node writing %s: %v, want permission denied", k, err)
		}
	}
	watch := client("etcd-watch")
	for _, p := range []string{keys.AuthorityPrefix(), keys.OwnersPrefix()} {
		if _, err := watch.Get(ctx, p, clientv3.WithPrefix()); err != nil {
			t.Errorf("the watch user reading %s: %v", p, err)
		}
		wctx, wcancel := context.WithCancel(ctx)
		if resp := <-watch.Watch(wctx, p, clientv3.WithPrefix(), clientv3.WithCreatedNotify()); resp.Err() != nil {
			t.Errorf("the watch user watching %s: %v", p, resp.Err())
		}
		wcancel()
		if _, err := watch.Put(ctx, p+"x", "1"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("the watch user writing %s: %v, want permission denied", p, err)
		}
	}
	for _, k := range []string{keys.Base() + "x", keys.Base() + "catalog/", "/other"} {
		if _, err := watch.Get(ctx, k, clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("the watch user reading %s: %v, want permission denied", k, err)
		}
	}
	if _, err := loc.Put(ctx, "/other", "1"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("locationd writing outside its prefix: %v, want permission denied", err)
	}
	if _, err := root.Put(ctx, "/other", "1"); err != nil {
		t.Fatalf("root: %v", err)
	}
	if _, err := node.Delete(ctx, keys.OwnersPrefix(), clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("node deleting every owner key: %v, want permission denied", err)
	}
	if enabled, err := etcdauth.Setup(ctx, loc, keys, nil); err != nil || enabled {
		t.Fatalf("second setup: %v %v, want nothing done", enabled, err)
	}
	// A node added later: its user does not exist until root adds it.
	n2 := client("etcd-node-n2")
	if _, err := n2.Put(ctx, keys.Owner("n2"), "1"); err == nil {
		t.Fatal("node n2 wrote before it had a user")
	}
	if err := etcdauth.AddNodes(ctx, loc, keys, []string{"n2"}); err == nil {
		t.Fatal("locationd's user added a node user; only root may")
	}
	if err := etcdauth.AddNodes(ctx, root, keys, []string{"n2"}); err != nil {
		t.Fatalf("root adding n2: %v", err)
	}
	if _, err := n2.Put(ctx, keys.Owner("n2"), "1"); err != nil {
		t.Fatalf("node n2 writing its owner key: %v", err)
	}
	if _, err := n2.Put(ctx, keys.Owner("n1"), "1"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("node n2 writing n1's owner key: %v, want permission denied", err)
	}
	// A lease and an election key, as nodes and locationd use them.
	g, err := node.Grant(ctx, 5)
	if err != nil {
		t.Fatalf("node granting a lease: %v", err)
	}
	if _, err := node.Put(ctx, keys.Owner("n1"), "{}", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.Revoke(ctx, g.ID); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("node n2 revoking n1's lease: %v, want permission denied", err)
	}
	if _, err := node.Revoke(ctx, g.ID); err != nil {
		t.Fatalf("node revoking its lease: %v", err)
	}
}
