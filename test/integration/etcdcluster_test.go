package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/meshloc/meshloc/internal/etcdfault"
	"github.com/meshloc/meshloc/pkg/client"
)

// clusterMember is one locationd process running one member of a 3-member
// embedded etcd cluster.
type clusterMember struct {
	name      string
	clientURL string // its etcd member's client URL
	args      []string
	p         *process
	api       *client.Admin
}

// start (re)starts the member's process with its flags (and so its data dir).
func (m *clusterMember) start(t *testing.T) {
	t.Helper()
	m.p = startProcess(t, "locationd "+m.name, binary(t, "locationd"), m.args...)
}

// startEtcdCluster starts three locationd processes as the members m1, m2, m3
// of one etcd cluster, on free ports, and waits until /readyz answers on all
// three. Like startLocationd, it starts over with new ports when a member
// lost one of its ports to another process.
func startEtcdCluster(t *testing.T) []*clusterMember {
	t.Helper()
	for attempt := 1; ; attempt++ {
		ms := make([]*clusterMember, 3)
		var peers []string
		for i := range ms {
			peerURL := "http://" + freeAddr(t)
			ms[i] = &clusterMember{name: fmt.Sprintf("m%d", i+1), clientURL: "http://" + freeAddr(t)}
			peers = append(peers, ms[i].name+"="+peerURL)
			httpAddr := freeAddr(t)
			ms[i].args = []string{
				"--name", ms[i].name,
				"--data-dir", filepath.Join(t.TempDir(), ms[i].name),
				"--listen-client", ms[i].clientURL,
				"--listen-peer", peerURL,
				"--http", httpAddr,
				"--initial-cluster-state", "new",
				"--initial-cluster-token", "meshloc-integration",
			}
			cl, err := client.NewAdmin("http://"+httpAddr, httpClient(t))
			if err != nil {
				t.Fatal(err)
			}
			ms[i].api = cl
		}
		for _, m := range ms {
			m.args = append(m.args, "--initial-cluster", strings.Join(peers, ","))
			m.start(t)
		}
		err := waitReady(ms...)
		if err == nil {
			return ms
		}
		lostPort := false
		for _, m := range ms {
			lostPort = lostPort || (!m.p.alive() && strings.Contains(m.p.out.String(), "address already in use"))
		}
		if attempt < 5 && lostPort {
			for _, m := range ms {
				_ = m.p.stop(stopTimeout)
			}
			continue
		}
		t.Fatalf("cluster not ready: %v", err)
	}
}

// waitReady waits up to 2 minutes until /readyz answers on every member, and
// fails early when one of their processes exits.
func waitReady(ms ...*clusterMember) error {
	deadline := time.Now().Add(2 * time.Minute)
	for _, m := range ms {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := m.api.Ready(ctx)
			cancel()
			if err == nil {
				break
			}
			if !m.p.alive() {
				return fmt.Errorf("%s exited (%v): %v\n%s", m.name, m.p.err, err, m.p.out)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %v", m.name, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// quietClient is an etcd client of endpoints that logs nothing (the retries
// of a write while a leader is elected are expected here), closed when the
// test ends.
func quietClient(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestEtcdClusterLocationd: three locationd processes form one 3-member etcd
// cluster, each serving the API. A write through member 1 is read through
// member 3; member 2 is SIGKILLed, the two others still write (a quorum);
// member 2 restarted with the same data dir and flags rejoins and serves,
// through its own endpoint and a linearizable read, the write made while it
// was down; the members' key-value states are equal (HashKV); SIGTERM stops
// every member with status 0.
func TestEtcdClusterLocationd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	ms := startEtcdCluster(t)
	m1, m2, m3 := ms[0], ms[1], ms[2]
	eps := []string{m1.clientURL, m2.clientURL, m3.clientURL}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	procs := func() []*process { return []*process{m1.p, m2.p, m3.p} }

	if err := etcdfault.WaitHealthy(ctx, eps); err != nil {
		t.Fatal(err)
	}
	members, err := etcdfault.Members(ctx, quietClient(t, eps...))
	if err != nil || len(members) != 3 || members[0].Name != "m1" || members[1].Name != "m2" || members[2].Name != "m3" {
		t.Fatalf("members: %+v, %v", members, err)
	}
	m2ID := members[1].ID

	// Written through member 1, read through member 3.
	const k1, k2 = "/integration/etcdcluster/k1", "/integration/etcdcluster/k2"
	c1, c3 := quietClient(t, m1.clientURL), quietClient(t, m3.clientURL)
	if _, err := c1.Put(ctx, k1, "v1"); err != nil {
		t.Fatalf("put through m1: %v", err)
	}
	if resp, err := c3.Get(ctx, k1); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v1" ||
		resp.Header.MemberId != members[2].ID {
		t.Fatalf("get through m3: %+v, %v", resp, err)
	}

	// Member 2 killed: the other two are a quorum and still write (retried
	// while they elect a new leader, if m2 led).
	m2.p.kill()
	var rev int64
	waitFor(t, time.Minute, "write with m2 down", func(ctx context.Context) error {
		resp, err := c1.Put(ctx, k2, "v2")
		if err == nil {
			rev = resp.Header.Revision
		}
		return err
	}, m1.p, m3.p)
	for _, m := range []*clusterMember{m1, m3} {
		waitFor(t, 30*time.Second, m.name+" ready with m2 down", m.api.Ready, m1.p, m3.p)
	}

	// Restarted with the same data dir and flags: it rejoins from its WAL
	// and serves the write it missed, through its own endpoint only.
	m2.start(t)
	if err := waitReady(m2); err != nil {
		t.Fatal(err)
	}
	c2 := quietClient(t, m2.clientURL)
	waitFor(t, time.Minute, "m2 serves the write made while it was down", func(ctx context.Context) error {
		resp, err := c2.Get(ctx, k2) // linearizable: WithSerializable is off
		switch {
		case err != nil:
			return err
		case resp.Header.MemberId != m2ID:
			return fmt.Errorf("answered by member %x, not m2 (%x)", resp.Header.MemberId, m2ID)
		case len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v2" || resp.Kvs[0].ModRevision != rev:
			return fmt.Errorf("got %v, want v2 at revision %d", resp.Kvs, rev)
		}
		return nil
	}, procs()...)
	if resp, err := c2.Get(ctx, k2, clientv3.WithSerializable()); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("serializable read through m2 after the linearizable one: %+v, %v", resp, err)
	}
	if err := etcdfault.WaitHealthy(ctx, eps); err != nil {
		t.Fatal(err)
	}
	if err := etcdfault.HashKVEqual(ctx, eps, 0); err != nil {
		t.Fatal(err)
	}

	// Every member stops cleanly.
	for _, p := range procs() {
		if err := p.stop(stopTimeout); err != nil || p.err != nil {
			t.Errorf("%s: stop %v, exit %v", p.name, err, p.err)
		}
	}
}
