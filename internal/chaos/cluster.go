package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/meshloc/meshloc/internal/freeport"
	"github.com/meshloc/meshloc/internal/pgserver"
	"github.com/meshloc/meshloc/internal/tcpproxy"
	"github.com/meshloc/meshloc/internal/verify"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/mtls"
)

// Config of a process cluster.
type Config struct {
	// BinDir holds the locationd and meshnode binaries. Failpoint faults and
	// planted bugs need them built with -tags failpoints.
	BinDir string
	// WorkDir receives the data directories, the process logs
	// (<name>.log) and the nodes' execution logs (<name>.exec.jsonl).
	WorkDir string
	// Nodes is the number of meshnodes n1..nN (default 3).
	Nodes int
	// EtcdMembers is 1 (one locationd with its embedded etcd, the default) or
	// 3 (three locationd processes whose embedded etcds form one cluster).
	EtcdMembers int
	// LeaseTTL of the nodes (default 2 s).
	LeaseTTL time.Duration
	// Proxies puts a TCP proxy in front of every node (every connection to
	// it, from peers and clients, goes through it) and between every node
	// and every etcd member, for the link faults.
	Proxies bool
	// Env is added to every meshnode's environment (MESHLOC_PLANT=…,
	// MESHLOC_FAILPOINTS=…).
	Env []string
	// NodeArgs are extra meshnode flags.
	NodeArgs []string
	// MemberArgs are extra locationd flags.
	MemberArgs []string
	// TLS runs the cluster secured: Start makes a CA and every certificate
	// in WorkDir/certs (mtls.Init), locationd serves HTTPS and its embedded
	// etcd TLS with authentication, nodes require mutual TLS, and the
	// cluster's own clients use the admin certificates (CertDir says where).
	TLS bool
	// CallTimeout of the clients (default 6 s).
	CallTimeout time.Duration
	// CallTimeouts, when set, bound the workload streams' calls in turn
	// (verify.Config.OpTimeouts); the clients' own bound is then the
	// largest.
	CallTimeouts []time.Duration
	// RelocationTimeout is the deadline asked for each relocation (default 5 s).
	RelocationTimeout time.Duration
	// StateStore is where the nodes keep durable state: "etcd" (or
	// empty, the default) or "postgres": a PostgreSQL server the cluster
	// starts in a directory of its own (internal/pgserver), every node
	// given --state-store with its address.
	StateStore string
	// Logf, if set, gets progress lines.
	Logf func(format string, args ...any)
}

func (c *Config) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

// Member is one locationd process with its embedded etcd member.
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
	HTTP      string
	DataDir   string
	proc      *Process
	api       *client.Admin
}

// Node is one meshnode process.
type Node struct {
	Name string
	// Listen is where the process listens; Address is what others dial: its
	// ingress proxy, or Listen without proxies.
	Listen  string
	Address string
	HTTP    string
	ExecLog string
	// Gen is the owner generation of its current life, once serving.
	Gen int64

	ingress *tcpproxy.Proxy
	etcd    []*tcpproxy.Proxy // one per member
	proc    *Process
	stopped bool // SIGSTOPped
}

// Cluster is locationd (etcd) and meshnode processes, with proxies; it
// implements verify.Cluster, verify.Healer and verify.ExecLogSource.
type Cluster struct {
	cfg     Config
	members []*Member
	nodes   []*Node
	etcd    *clientv3.Client
	store   *authority.Store
	pg      *pgserver.Server // StateStore postgres
	pgDir   string
	keys    keyspace.Keys
	hc      *http.Client

	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn
	clients []*client.Client
	closed  bool
	// groupTurn picks the node of the next group (MakeGroup).
	groupTurn int

	// adminTLS: the admin certificate the cluster's own gRPC connections
	// present (TLS only).
	adminTLS *mtls.Reloader

	// faults run one at a time.
	faultMu sync.Mutex

	evMu   sync.Mutex
	events []Event
}

// Event is something the harness did to a process, for checks that need
// to know when (e.g. nothing served by a node after it woke up).
type Event struct {
	At   time.Time `json:"at"`
	Node string    `json:"node"`
	// Gen is the node's owner generation when it happened.
	Gen  int64  `json:"gen"`
	What string `json:"what"` // sigkill, sigstop, sigcont, restarted, ...
}

func (c *Cluster) event(n *Node, what string) {
	c.evMu.Lock()
	c.events = append(c.events, Event{At: time.Now(), Node: n.Name, Gen: n.Gen, What: what})
	c.evMu.Unlock()
}

// Events are what the harness did, in order.
func (c *Cluster) Events() []Event {
	c.evMu.Lock()
	defer c.evMu.Unlock()
	return slices.Clone(c.events)
}

var (
	_ verify.Cluster       = (*Cluster)(nil)
	_ verify.Healer        = (*Cluster)(nil)
	_ verify.ExecLogSource = (*Cluster)(nil)
	_ verify.GroupMaker    = (*Cluster)(nil)
)

// Start starts the cluster and waits until every member is ready and every
// node serves. On error everything started is stopped.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Nodes <= 0 {
		cfg.Nodes = 3
	}
	if cfg.EtcdMembers == 0 {
		cfg.EtcdMembers = 1
	}
	if cfg.StateStore != "" && cfg.StateStore != "etcd" && cfg.StateStore != "postgres" {
		return nil, fmt.Errorf("chaos: state store %q: want etcd or postgres", cfg.StateStore)
	}
	if cfg.EtcdMembers != 1 && cfg.EtcdMembers != 3 {
		return nil, fmt.Errorf("chaos: %d etcd members: want 1 or 3", cfg.EtcdMembers)
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 2 * time.Second
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 6 * time.Second
	}
	for _, d := range cfg.CallTimeouts {
		cfg.CallTimeout = max(cfg.CallTimeout, d)
	}
	if cfg.RelocationTimeout <= 0 {
		cfg.RelocationTimeout = 5 * time.Second
	}
	if cfg.WorkDir == "" {
		return nil, errors.New("chaos: a work directory is required")
	}
	for _, b := range []string{"locationd", "meshnode"} {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil {
			return nil, fmt.Errorf("chaos: binary %s: %w (build them: go build -tags failpoints -o <dir> ./cmd/...)", b, err)
		}
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, keys: keyspace.Default(), conns: map[string]*grpc.ClientConn{},
		hc: &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}}
	if cfg.TLS {
		if err := c.makeCerts(); err != nil {
			return nil, err
		}
	}
	if err := c.start(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func addr() string {
	a, err := freeport.Addr()
	if err != nil {
		panic(err) // no free port among 12,000: the machine is unusable
	}
	return a
}

func (c *Cluster) start(ctx context.Context) error {
	var initial []string
	for i := range c.cfg.EtcdMembers {
		scheme := c.scheme()
		m := &Member{Name: fmt.Sprintf("e%d", i+1), ClientURL: scheme + addr(), PeerURL: scheme + addr(), HTTP: addr(),
			DataDir: filepath.Join(c.cfg.WorkDir, fmt.Sprintf("e%d", i+1))}
		var err error
		if m.api, err = client.NewAdmin(scheme+m.HTTP, c.hc); err != nil {
			return err
		}
		c.members = append(c.members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range c.members {
		if err := c.startMember(m, strings.Join(initial, ",")); err != nil {
			return err
		}
	}
	for _, m := range c.members {
		if err := c.waitMember(ctx, m); err != nil {
			return err
		}
	}
	var err error
	ecfg, err := c.EtcdAccess("etcd-root").ClientConfig()
	if err != nil {
		return err
	}
	if c.etcd, err = clientv3.New(ecfg); err != nil {
		return err
	}
	c.store = authority.New(c.etcd, c.keys)
	if err := c.startPostgres(ctx); err != nil {
		return err
	}
	for i := range c.cfg.Nodes {
		n := &Node{Name: fmt.Sprintf("n%d", i+1), Listen: addr(), HTTP: addr(),
			ExecLog: filepath.Join(c.cfg.WorkDir, fmt.Sprintf("n%d.exec.jsonl", i+1))}
		n.Address = n.Listen
		if c.cfg.Proxies {
			p, err := tcpproxy.New(addr(), n.Listen)
			if err != nil {
				return err
			}
			n.ingress, n.Address = p, p.Addr()
			for _, m := range c.members {
				ep, err := tcpproxy.New(addr(), strings.TrimPrefix(m.ClientURL, c.scheme()))
				if err != nil {
					return err
				}
				n.etcd = append(n.etcd, ep)
			}
		}
		c.nodes = append(c.nodes, n)
		if err := c.startNode(n, nil); err != nil {
			return err
		}
	}
	for _, n := range c.nodes {
		if err := c.waitServing(ctx, n, 0, time.Minute); err != nil {
			return err
		}
	}
	c.cfg.logf("chaos: %d etcd member(s) and %d nodes serving (proxies %v)", len(c.members), len(c.nodes), c.cfg.Proxies)
	return nil
}

func (c *Cluster) startMember(m *Member, initial string) error {
	args := []string{"--data-dir", m.DataDir, "--listen-client", m.ClientURL, "--listen-peer", m.PeerURL, "--http", m.HTTP}
	if len(c.members) > 1 {
		args = append(args, "--name", m.Name, "--initial-cluster", initial)
	}
	if c.cfg.TLS {
		cert, key, ca := c.certFile(m.Name+".crt"), c.certFile(m.Name+".key"), c.certFile("ca.crt")
		args = append(args, "--cert-file", cert, "--key-file", key, "--trusted-ca-file", ca,
			"--peer-cert-file", cert, "--peer-key-file", key, "--peer-trusted-ca-file", ca,
			"--etcd-cert", c.certFile("etcd-locationd.crt"), "--etcd-key", c.certFile("etcd-locationd.key"),
			"--etcd-node-users", strings.Join(c.nodeNames(), ","), "--crl-file", c.certFile(mtls.CRLFile))
	}
	args = append(args, c.cfg.MemberArgs...)
	p, err := startProcess(m.Name, filepath.Join(c.cfg.BinDir, "locationd"), filepath.Join(c.cfg.WorkDir, m.Name+".log"), nil, args...)
	if err != nil {
		return err
	}
	m.proc = p
	return nil
}

func (c *Cluster) waitMember(ctx context.Context, m *Member) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := m.api.Ready(rctx)
		cancel()
		if err == nil {
			return nil
		}
		if !m.proc.Alive() {
			return fmt.Errorf("chaos: locationd %s exited (%v):\n%s", m.Name, m.proc.Err(), m.proc.Output())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("chaos: locationd %s not ready: %v", m.Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startNode starts n's process with extra environment env (on top of
// Config.Env).
func (c *Cluster) startNode(n *Node, env []string) error {
	endpoints := c.EtcdEndpoints()
	if c.cfg.Proxies {
		endpoints = endpoints[:0]
		for _, p := range n.etcd {
			endpoints = append(endpoints, c.scheme()+p.Addr())
		}
	}
	args := append([]string{"--name", n.Name, "--etcd-endpoints", strings.Join(endpoints, ","), "--listen", n.Listen,
		"--advertise", n.Address, "--http", n.HTTP, "--lease-ttl", c.cfg.LeaseTTL.String(), "--exec-log", n.ExecLog},
		c.cfg.NodeArgs...)
	if c.cfg.TLS {
		args = append(args, "--cert-file", c.certFile(n.Name+".crt"), "--key-file", c.certFile(n.Name+".key"), "--trusted-ca-file", c.certFile("ca.crt"),
			"--etcd-cacert", c.certFile("ca.crt"), "--etcd-cert", c.certFile(mtls.EtcdNodeFile(n.Name)+".crt"), "--etcd-key", c.certFile(mtls.EtcdNodeFile(n.Name)+".key"),
			"--crl-file", c.certFile(mtls.CRLFile))
	}
	p, err := startProcess(n.Name, filepath.Join(c.cfg.BinDir, "meshnode"), filepath.Join(c.cfg.WorkDir, n.Name+".log"),
		append(slices.Clone(c.cfg.Env), env...), args...)
	if err != nil {
		return err
	}
	n.proc, n.stopped = p, false
	return nil
}

// owners lists the live owners in etcd.
func (c *Cluster) owners(ctx context.Context) (map[string]lease.Owner, error) {
	lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	list, _, err := lease.ListOwners(lctx, c.etcd, c.keys)
	if err != nil {
		return nil, err
	}
	out := map[string]lease.Owner{}
	for _, o := range list {
		out[o.Descriptor.OwnerID] = o
	}
	return out, nil
}

// waitServing waits until n serves at its address with a generation larger
// than after.
func (c *Cluster) waitServing(ctx context.Context, n *Node, after int64, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		owns, err := c.owners(ctx)
		if err == nil {
			if o, ok := owns[n.Name]; ok && o.Descriptor.State == lease.StateServing && o.Descriptor.Address == n.Address && o.Generation > after {
				n.Gen = o.Generation
				return nil
			}
		}
		if !n.proc.Alive() {
			return fmt.Errorf("chaos: %s exited (%v):\n%s", n.Name, n.proc.Err(), n.proc.Output())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("chaos: %s not serving after %v (last: %v)", n.Name, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// restartNode starts a node that exited again (with env) and waits until it
// serves as a new generation.
func (c *Cluster) restartNode(ctx context.Context, n *Node, env []string) error {
	if n.proc.Alive() {
		return fmt.Errorf("chaos: %s is still running", n.Name)
	}
	old := n.Gen
	if err := c.startNode(n, env); err != nil {
		return err
	}
	// A restart waits for its predecessor's owner key to expire first.
	if err := c.waitServing(ctx, n, old, c.cfg.LeaseTTL+45*time.Second); err != nil {
		return err
	}
	c.event(n, "restarted")
	return nil
}

// startPostgres starts the PostgreSQL server of StateStore postgres (in a
// directory of its own under the system's temporary one: the server runs
// as an unprivileged user, who must reach it) and gives the nodes its
// address.
func (c *Cluster) startPostgres(ctx context.Context) error {
	if c.cfg.StateStore != "postgres" {
		return nil
	}
	dir, err := os.MkdirTemp("", "meshloc-chaos-pg-")
	if err != nil {
		return err
	}
	c.pgDir = dir
	if c.pg, err = pgserver.Launch(ctx, dir); err != nil {
		return fmt.Errorf("chaos: postgres: %w", err)
	}
	c.cfg.NodeArgs = append(slices.Clip(c.cfg.NodeArgs), "--state-store", c.pg.DSN())
	c.cfg.logf("postgres: %s (log %s)", c.pg.DSN(), c.pg.LogPath())
	return nil
}

// stopPostgres stops that server and removes its directory.
func (c *Cluster) stopPostgres() {
	if c.pg != nil {
		c.pg.Stop()
	}
	if c.pgDir != "" {
		os.RemoveAll(c.pgDir)
	}
}
