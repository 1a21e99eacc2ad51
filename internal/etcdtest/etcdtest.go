// Package etcdtest starts real embedded etcd members for tests: one member, or
// a 3-member cluster, on free loopback ports in a temporary directory.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/embedetcd"
	"github.com/meshloc/meshloc/internal/freeport"
	"github.com/meshloc/meshloc/pkg/mtls"
)

// FreePort returns a free loopback TCP port for a server that binds it later
// (see freeport.Get: it is picked below Linux's ephemeral range).
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Single starts one member; it is closed when the test ends. The free ports
// it picks can be taken by another process before etcd binds them (tests of
// other packages run at the same time), so a bind failure is retried with
// new ports.
func Single(t testing.TB) *embedetcd.Server {
	t.Helper()
	return SingleWith(t, nil)
}

// SingleWith is Single with tune applied to the member's config (its
// quota, its maintenance).
func SingleWith(t testing.TB, tune func(*embedetcd.Config)) *embedetcd.Server {
	t.Helper()
	var err error
	for range 5 {
		c := embedetcd.Config{
			Name:      "t0",
			LogLevel:  "fatal", // etcd logs cancelled reads at error level: noise in tests
			Dir:       t.TempDir(),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", FreePort(t)),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", FreePort(t)),
		}
		if tune != nil {
			tune(&c)
		}
		var s *embedetcd.Server
		s, err = embedetcd.Start(context.Background(), c)
		if err == nil {
			t.Cleanup(s.Close)
			return s
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	t.Fatalf("etcd: %v", err)
	return nil
}

// Cluster starts n members forming one cluster.
func Cluster(t testing.TB, n int) []*embedetcd.Server {
	t.Helper()
	names := make([]string, n)
	peers := make([]string, n)
	clients := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("m%d", i)
		peers[i] = fmt.Sprintf("http://127.0.0.1:%d", FreePort(t))
		clients[i] = fmt.Sprintf("http://127.0.0.1:%d", FreePort(t))
	}
	ic := embedetcd.ClusterString(names, peers)
	out := make([]*embedetcd.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			out[i], errs[i] = embedetcd.Start(context.Background(), embedetcd.Config{
				Name: names[i], Dir: t.TempDir(), ClientURL: clients[i], PeerURL: peers[i],
				InitialCluster: ic, ClusterToken: "etcdtest", LogLevel: "fatal",
			})
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("etcd member %d: %v", i, errs[i])
		}
		t.Cleanup(out[i].Close)
	}
	return out
}

// Client returns a client for the endpoints, closed when the test ends.
func Client(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ForExample starts one member for a runnable Example (which has no
// testing.T): its client endpoint, and stop, which closes it and removes
// its data. It panics when etcd cannot start.
func ForExample() (endpoint string, stop func()) {
	dir, err := os.MkdirTemp("", "meshloc-example-etcd-")
	if err != nil {
		panic(err)
	}
	for range 5 {
		cp, err1 := freeport.Get()
		pp, err2 := freeport.Get()
		if err = errors.Join(err1, err2); err != nil {
			break
		}
		var s *embedetcd.Server
		s, err = embedetcd.Start(context.Background(), embedetcd.Config{Name: "ex", LogLevel: "fatal", Dir: dir,
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", cp), PeerURL: fmt.Sprintf("http://127.0.0.1:%d", pp)})
		if err == nil {
			return s.Endpoint(), func() { s.Close(); os.RemoveAll(dir) }
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	os.RemoveAll(dir)
	panic(fmt.Sprintf("etcd for the example: %v", err))
}

// RaiseNoSpace raises etcd's NOSPACE alarm on the member c reaches, as a
// member whose file reached its quota does: from then on every write that
// puts a key is refused ("mvcc: database space exceeded") until
// DisarmNoSpace. Its memberID is returned.
func RaiseNoSpace(t testing.TB, c *clientv3.Client) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Status(ctx, c.Endpoints()[0])
	if err != nil {
		t.Fatalf("etcd status: %v", err)
	}
	id := st.Header.MemberId
	if _, err := pb.NewMaintenanceClient(c.ActiveConnection()).Alarm(ctx, &pb.AlarmRequest{
		Action: pb.AlarmRequest_ACTIVATE, MemberID: id, Alarm: pb.AlarmType_NOSPACE}); err != nil {
		t.Fatalf("raise NOSPACE: %v", err)
	}
	return id
}

// DisarmNoSpace disarms the NOSPACE alarm of every member (etcdctl alarm
// disarm).
func DisarmNoSpace(t testing.TB, c *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := c.AlarmList(ctx)
	if err != nil {
		t.Fatalf("etcd alarms: %v", err)
	}
	for _, a := range list.Alarms {
		if a.Alarm != pb.AlarmType_NOSPACE {
			continue
		}
		if _, err := c.AlarmDisarm(ctx, (*clientv3.AlarmMember)(a)); err != nil {
			t.Fatalf("disarm NOSPACE: %v", err)
		}
	}
}

// Secured starts one member whose client port is TLS with client
// certificates, using the files mtls.Init wrote into dir (server: the name
// of the server certificate, a locationd's). It returns the member and a
// function that makes a client connected as the etcd user whose
// certificate is dir/<file>.crt (closed when the test ends), to the member
// or to endpoints (a proxy of it).
func Secured(t testing.TB, dir, server string) (*embedetcd.Server, func(file string, endpoints ...string) *clientv3.Client) {
	t.Helper()
	f := func(n string) string { return filepath.Join(dir, n) }
	srv := SingleWith(t, func(c *embedetcd.Config) {
		c.ClientURL = strings.Replace(c.ClientURL, "http://", "https://", 1)
		c.ClientTLS = &embedetcd.TLSFiles{Cert: f(server + ".crt"), Key: f(server + ".key"), CA: f("ca.crt")}
	})
	as := func(file string, endpoints ...string) *clientv3.Client {
		t.Helper()
		if len(endpoints) == 0 {
			endpoints = []string{srv.Endpoint()}
		}
		cfg, err := mtls.Etcd{Endpoints: endpoints, CACert: f("ca.crt"), Cert: f(file + ".crt"), Key: f(file + ".key")}.ClientConfig()
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
	return srv, as
}
