package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/meshloc/meshloc/internal/etcdauth"
	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/mtls"
)

// meshctl etcd add-nodes, with root's certificate, gives a node added
// later its own etcd user: it may then write its owner key, and not
// another's; a bad name is a usage error and adds nothing; locationd's
// certificate may not add users.
func TestEtcdAddNodes(t *testing.T) {
	dir := t.TempDir()
	if _, err := mtls.Init(dir, mtls.InitOptions{Locationd: []string{"l1"}, Nodes: []string{"n1", "n4"}}); err != nil {
		t.Fatal(err)
	}
	f := func(n string) string { return filepath.Join(dir, n) }
	srv, as := etcdtest.Secured(t, dir, "l1")
	url := srv.Endpoint()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys := keyspace.Default()
	if _, err := etcdauth.Setup(ctx, as("etcd-locationd"), keys, []string{"n1"}); err != nil {
		t.Fatal(err)
	}
	args := func(user string, rest ...string) []string {
		return append([]string{"--etcd-endpoints", url, "--etcd-cacert", f("ca.crt"), "--etcd-cert", f(user + ".crt"), "--etcd-key", f(user + ".key"), "etcd", "add-nodes"}, rest...)
	}
	if r := meshctl(nil, args("etcd-root", "n4", "bad/name")...); r.code != 2 {
		t.Fatalf("a bad name: exit %d %q, want 2", r.code, r.stderr)
	}
	if r := meshctl(nil, args("etcd-locationd", "n4")...); r.code != 1 {
		t.Fatalf("with locationd's certificate: exit %d %q, want 1 (etcd refuses)", r.code, r.stderr)
	}
	n4 := as("etcd-node-n4")
	if _, err := n4.Put(ctx, keys.Owner("n4"), "1"); err == nil {
		t.Fatal("n4 wrote before it had a user")
	}
	r := meshctl(nil, args("etcd-root", "n4")...)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "meshloc-node-n4" {
		t.Fatalf("add-nodes n4: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if _, err := n4.Put(ctx, keys.Owner("n4"), "1"); err != nil {
		t.Fatalf("n4 writing its owner key: %v", err)
	}
	if _, err := n4.Put(ctx, keys.Owner("n1"), "1"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("n4 writing n1's owner key: %v, want permission denied", err)
	}
}
