package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/embedetcd"
	"github.com/meshloc/meshloc/internal/etcdauth"
	"github.com/meshloc/meshloc/internal/freeport"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/mtls"
	"github.com/meshloc/meshloc/pkg/node"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// mesh is what the meshloc figures run on: one embedded etcd member, two
// meshnodes that host objects (n1, n2) and one pure gateway (gw, weight 0),
// all in this process, talking real gRPC over loopback; a Go client that
// routes from etcd straight to owners, and one that calls through gw.
type mesh struct {
	dir     string
	secured bool
	etcd    *embedetcd.Server
	ec      *clientv3.Client
	ecfg    clientv3.Config       // ec's, for the baselines' clients of their own
	nodes   map[string]*node.Node // n1, n2, gw
	metrics map[string]*prometheus.Registry
	direct  *client.Client
	gateway *client.Client
}

// startMesh starts the mesh; secured, everything speaks mutual TLS as a
// secured cluster does: the embedded etcd serves TLS with certificate
// authentication (its users and roles set up), the nodes require and
// present certificates of one CA, the clients present admin's (the run's
// own etcd client is root: the baselines write outside the cluster's
// prefix).
func startMesh(ctx context.Context, dir string, secured bool, tune func(*node.Config)) (_ *mesh, err error) {
	m, err := startEtcd(ctx, dir, secured, nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			m.close()
		}
	}()
	certs := filepath.Join(dir, "certs")
	file := func(n string) string { return filepath.Join(certs, n) }
	for _, name := range []string{"n1", "n2", "gw"} {
		err := m.startNode(ctx, name, func(cfg *node.Config) {
			if tune != nil {
				tune(cfg)
			}
			if name == "gw" {
				cfg.Weight = 0
			}
			if secured {
				cfg.CertFile, cfg.KeyFile, cfg.TrustedCAFile = file(name+".crt"), file(name+".key"), file("ca.crt")
				e := m.access(mtls.EtcdNodeFile(name))
				cfg.EtcdCACert, cfg.EtcdCert, cfg.EtcdKey = e.CACert, e.Cert, e.Key
			}
		})
		if err != nil {
			return nil, err
		}
	}
	var tls mtls.Files
	if secured {
		tls = mtls.Files{CA: file("ca.crt"), Cert: file("admin.crt"), Key: file("admin.key")}
	}
	m.direct, err = client.New(ctx, client.Config{Etcd: m.ec, Timeout: 2 * time.Minute, TLS: tls})
	if err != nil {
		return nil, err
	}
	m.gateway, err = client.New(ctx, client.Config{Nodes: []string{m.nodes["gw"].Address()}, Timeout: 2 * time.Minute, TLS: tls})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// startEtcd starts a mesh without nodes: one embedded etcd member in
// dir/etcd and the run's root client of it (secured: TLS with certificate
// authentication, meshloc's users and roles set up, certificates in
// dir/certs for n1, n2 and gw). etcdTune, when set, changes the member's
// configuration (a scale part's quota). Nodes join with startNode.
func startEtcd(ctx context.Context, dir string, secured bool, etcdTune func(*embedetcd.Config)) (_ *mesh, err error) {
	m := &mesh{dir: dir, secured: secured, nodes: map[string]*node.Node{}, metrics: map[string]*prometheus.Registry{}}
	defer func() {
		if err != nil {
			m.close()
		}
	}()
	cu, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	pu, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	certs := filepath.Join(dir, "certs")
	file := func(n string) string { return filepath.Join(certs, n) }
	scheme := "http://"
	ecfg := embedetcd.Config{Name: "bench", Dir: dir + "/etcd", ClientURL: scheme + cu, PeerURL: "http://" + pu, LogLevel: "fatal"}
	if secured {
		if _, err := mtls.Init(certs, mtls.InitOptions{Nodes: []string{"n1", "n2", "gw"}, Locationd: []string{"bench"}}); err != nil {
			return nil, err
		}
		scheme = "https://"
		ecfg.ClientURL = scheme + cu
		ecfg.ClientTLS = &embedetcd.TLSFiles{Cert: file("bench.crt"), Key: file("bench.key"), CA: file("ca.crt")}
	}
	if etcdTune != nil {
		etcdTune(&ecfg)
	}
	m.etcd, err = embedetcd.Start(ctx, ecfg)
	if err != nil {
		return nil, err
	}
	cc, err := m.access("etcd-root").ClientConfig()
	if err != nil {
		return nil, err
	}
	m.ecfg = cc
	if m.ec, err = clientv3.New(cc); err != nil {
		return nil, err
	}
	if secured {
		if _, err := etcdauth.Setup(ctx, m.ec, keyspace.Default(), []string{"n1", "n2", "gw"}); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// access is how user reaches the mesh's etcd (its certificate when
// secured).
func (m *mesh) access(user string) mtls.Etcd {
	e := mtls.Etcd{Endpoints: []string{m.etcd.Endpoint()}}
	if m.secured {
		certs := filepath.Join(m.dir, "certs")
		e.CACert, e.Cert, e.Key = filepath.Join(certs, "ca.crt"), filepath.Join(certs, user+".crt"), filepath.Join(certs, user+".key")
	}
	return e
}

// followers is how many location caches follow every record: each node's
// and the direct client's.
func (m *mesh) followers() int { return len(m.nodes) + 1 }

func (m *mesh) close() {
	if m.direct != nil {
		m.direct.Close()
	}
	if m.gateway != nil {
		m.gateway.Close()
	}
	for _, n := range m.nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = n.Stop(ctx)
		cancel()
	}
	if m.ec != nil {
		m.ec.Close()
	}
	if m.etcd != nil {
		m.etcd.Close()
	}
	os.RemoveAll(m.dir + "/etcd")
	os.RemoveAll(filepath.Join(m.dir, "certs"))
}

// owned is an object the run moves between n1 and n2, with where it is now.
type owned struct {
	name string
	at   string // n1 or n2
}

// create makes the object with one call through the direct client and
// records the node that answered (its owner).
func (m *mesh) create(ctx context.Context, name, method string, args ...string) (*owned, error) {
	r, err := m.direct.Call(ctx, name, method, args...)
	if err != nil {
		return nil, fmt.Errorf("bench: create %s: %w", name, err)
	}
	if r.Node != "n1" && r.Node != "n2" {
		return nil, fmt.Errorf("bench: %s was created on %q", name, r.Node)
	}
	return &owned{name: name, at: r.Node}, nil
}

// move relocates o to the other hosting node and returns the source's
// status. A relocation that did not complete is an error (its outcome and
// message). opts: the relocation's options (the target is set here).
func (m *mesh) move(ctx context.Context, o *owned, opts ...node.RelocateOptions) (*pb.RelocationStatus, error) {
	to := map[string]string{"n1": "n2", "n2": "n1"}[o.at]
	var opt node.RelocateOptions
	if len(opts) > 0 {
		opt = opts[0]
	}
	opt.Target = to
	st, err := m.nodes[o.at].Relocate(ctx, o.name, opt)
	if err != nil {
		return nil, err
	}
	if st.GetOutcome() != "completed" {
		return nil, fmt.Errorf("bench: relocation of %s %s: %s", o.name, st.GetOutcome(), st.GetMessage())
	}
	o.at = to
	return st, nil
}

// interruption returns, for a completed relocation whose source status is
// st and whose target is now the owner, the interruption as the target measured it (seal on the source to
// admission on the target: one clock here) and as the source did (seal to
// the target's OUTCOME).
func (m *mesh) interruption(ctx context.Context, st *pb.RelocationStatus, on string) (target, source time.Duration, err error) {
	source = time.Duration(st.GetInterruptionUs()) * time.Microsecond
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, t := range m.nodes[on].Relocations() {
			if t.GetRole() == "target" && string(t.GetRelocationId()) == string(st.GetRelocationId()) && t.GetAdmittedUnixUs() > 0 {
				return time.Duration(t.GetInterruptionUs()) * time.Microsecond, source, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, 0, fmt.Errorf("bench: the target of %s reported no admission", st.GetObject())
		}
		time.Sleep(time.Millisecond)
	}
}

// startNode starts one node of the mesh with the builtin types, its own
// metrics registry and the bench's settings; tune adjusts its config.
func (m *mesh) startNode(ctx context.Context, name string, tune func(*node.Config)) error {
	reg := actor.NewRegistry()
	if err := builtin.Register(reg); err != nil {
		return err
	}
	cfg := node.DefaultConfig()
	cfg.Name = name
	cfg.EtcdEndpoints = []string{m.etcd.Endpoint()}
	cfg.Listen, cfg.HTTP = "127.0.0.1:0", ""
	cfg.LeaseTTL = 5 * time.Second
	cfg.RelocationTimeout = time.Minute
	if tune != nil {
		tune(&cfg)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mreg := prometheus.NewRegistry()
	n, err := node.New(cfg, node.WithRegistry(reg), node.WithListener(lis), node.WithMetrics(mreg))
	if err != nil {
		lis.Close()
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := n.Start(sctx); err != nil {
		return fmt.Errorf("bench: node %s: %w", name, err)
	}
	m.nodes[name], m.metrics[name] = n, mreg
	return nil
}
