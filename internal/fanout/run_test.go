package fanout

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/etcdauth"
	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/mtls"
)

// A secured cluster: etcd authenticates clients by certificate. The
// fan-out reads etcd as the read-only watch user and serves TLS with a
// locationd certificate; a node watches the records through it with its
// etcd client certificate while it writes them to etcd under its own
// identity. A client without a certificate of the CA is refused.
func TestRunSecured(t *testing.T) {
	dir := t.TempDir()
	if _, err := mtls.Init(dir, mtls.InitOptions{Locationd: []string{"l1"}, Nodes: []string{"n1"}}); err != nil {
		t.Fatal(err)
	}
	f := func(n string) string { return filepath.Join(dir, n) }
	srv, as := etcdtest.Secured(t, dir, "l1")
	url := srv.Endpoint()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	keys := keyspace.Default()
	if _, err := etcdauth.Setup(ctx, as("etcd-locationd", url), keys, []string{"n1"}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Listen: "127.0.0.1:0", Keys: keys, History: DefaultHistory, Queue: DefaultQueue,
		Etcd: mtls.Etcd{Endpoints: []string{url}, CACert: f("ca.crt"), Cert: f("etcd-watch.crt"), Key: f("etcd-watch.key")},
		TLS:  mtls.Files{CA: f("ca.crt"), Cert: f("l1.crt"), Key: f("l1.key")}}
	rctx, stop := context.WithCancel(ctx)
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- Run(rctx, cfg, zerolog.Nop(), func(a string) { addr <- a }) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	var hub string
	select {
	case hub = <-addr:
	case err := <-done:
		t.Fatal(err)
	}
	node, watch := as("etcd-node-n1", url), as("etcd-node-n1", "https://"+hub)
	wch := watch.Watch(ctx, keys.AuthorityPrefix(), clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if resp := <-wch; !resp.Created || resp.Err() != nil {
		t.Fatalf("watch through the fan-out: %+v %v", resp, resp.Err())
	}
	put, err := node.Put(ctx, keys.AuthorityPrefix()+"actor/counter/c1", "x")
	if err != nil {
		t.Fatal(err)
	}
	if resp := <-wch; len(resp.Events) != 1 || resp.Events[0].Kv.ModRevision != put.Header.Revision {
		t.Fatalf("through the fan-out: %+v %v", resp, resp.Err())
	}
	plain, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + hub}, DialTimeout: 2 * time.Second,
		TLS: mustClientTLS(t, f("ca.crt"))})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	nctx, ncancel := context.WithTimeout(ctx, 5*time.Second)
	defer ncancel()
	select {
	case resp, ok := <-plain.Watch(nctx, keys.AuthorityPrefix(), clientv3.WithPrefix(), clientv3.WithCreatedNotify()):
		if ok && resp.Err() == nil && resp.Created {
			t.Fatal("a client without a certificate was served")
		}
	case <-nctx.Done():
	}
}

// mustClientTLS trusts ca and presents no certificate.
func mustClientTLS(t *testing.T, ca string) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}
