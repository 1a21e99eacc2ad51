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
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/internal/etcdfault"
	"github.com/meshloc/meshloc/internal/freeport"
	"github.com/meshloc/meshloc/internal/locationd/api"
	"github.com/meshloc/meshloc/internal/tcpproxy"
	"github.com/meshloc/meshloc/internal/verify"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/mtls"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
	"github.com/meshloc/meshloc/pkg/wire/transport"
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
	api       *api.Client
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
		if m.api, err = api.NewClient(scheme+m.HTTP, c.hc); err != nil {
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
			"--etcd-cert", c.certFile("etcd-locationd.crt"), "--etcd-key", c.certFile("etcd-locationd.key"))
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
			"--etcd-cacert", c.certFile("ca.crt"), "--etcd-cert", c.certFile("etcd-node.crt"), "--etcd-key", c.certFile("etcd-node.key"))
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

// EtcdEndpoints are the members' client URLs.
func (c *Cluster) EtcdEndpoints() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, m.ClientURL)
	}
	return out
}

// Members of the etcd cluster.
func (c *Cluster) Members() []*Member { return c.members }

// NodeList is the cluster's nodes.
func (c *Cluster) NodeList() []*Node { return c.nodes }

// Node is the node named name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Addresses are the nodes' dial addresses (gateways).
func (c *Cluster) Addresses() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.Address)
	}
	return out
}

// NewCaller alternates: a client routing from etcd straight to owners, then
// one sending every call through the nodes as gateways.
func (c *Cluster) NewCaller(ctx context.Context) (verify.Caller, error) {
	c.mu.Lock()
	gateway := len(c.clients)%2 == 1
	c.mu.Unlock()
	cfg := client.Config{EtcdEndpoints: c.EtcdEndpoints(), Timeout: c.cfg.CallTimeout}
	if gateway {
		cfg = client.Config{Nodes: c.Addresses(), Timeout: c.cfg.CallTimeout}
	}
	if c.cfg.TLS {
		cfg.TLS, cfg.EtcdTLS = c.Files("admin"), c.EtcdAccess("etcd-root")
	}
	cl, err := client.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.clients = append(c.clients, cl)
	c.mu.Unlock()
	return cl, nil
}

// Nodes are the node names (relocation targets).
func (c *Cluster) Nodes() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.Name)
	}
	return out
}

func (c *Cluster) Etcd() *clientv3.Client { return c.etcd }
func (c *Cluster) Keys() keyspace.Keys    { return c.keys }

// Store is an authority store on the cluster's etcd.
func (c *Cluster) Store() *authority.Store { return c.store }

func (c *Cluster) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	opts := transport.DialOptions()
	if c.adminTLS != nil {
		opts = append(opts, grpc.WithTransportCredentials(c.adminTLS.ClientCredentials(mtls.WantRole(mtls.RoleNode))))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cc
	return cc, nil
}

// Admin is an AdminService client of the node at addr.
func (c *Cluster) Admin(addr string) (rpcpb.AdminServiceClient, error) {
	cc, err := c.conn(addr)
	if err != nil {
		return nil, err
	}
	return rpcpb.NewAdminServiceClient(cc), nil
}

// Relocate asks the object's owner, as etcd names it, through its AdminService.
func (c *Cluster) Relocate(ctx context.Context, object, target string) (*pb.RelocationStatus, error) {
	obj, err := keyspace.ParseObject(object)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	snap, err := c.store.Read(ctx, obj)
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, "authority: "+err.Error())
	}
	a, err := c.Admin(snap.Record.Node.Address)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return a.Relocate(ctx, &pb.RelocateCommand{Object: object, Target: target, TimeoutMs: c.cfg.RelocationTimeout.Milliseconds()})
}

// ExecLogs reads every node's execution log.
func (c *Cluster) ExecLogs(ctx context.Context) (map[string][]verify.ExecEntry, error) {
	var paths []string
	for _, n := range c.nodes {
		paths = append(paths, n.ExecLog)
	}
	return verify.ExecLogFiles(paths).ExecLogs(ctx)
}

// Heal ends every fault: proxies forward cleanly again, stopped nodes
// continue, dead members and nodes are restarted, a node that lost its
// lease but still runs (it should have stopped) is killed and restarted;
// then it waits until every member is ready and every node serves.
func (c *Cluster) Heal(ctx context.Context) error {
	c.faultMu.Lock()
	defer c.faultMu.Unlock()
	for _, n := range c.nodes {
		c.forwardClean(n)
		if n.stopped {
			_ = n.proc.Signal(syscall.SIGCONT)
			n.stopped = false
		}
	}
	var errs []error
	initial := c.initialCluster()
	for _, m := range c.members {
		if !m.proc.Alive() {
			if err := c.startMember(m, initial); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, m := range c.members {
		if err := c.waitMember(ctx, m); err != nil {
			errs = append(errs, err)
		}
	}
	owns, err := c.owners(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, n := range c.nodes {
		o, ok := owns[n.Name]
		if n.proc.Alive() && (!ok || o.Generation != n.Gen) {
			c.cfg.logf("chaos: heal: %s runs without its lease (generation %d gone): killing it", n.Name, n.Gen)
			n.proc.Kill()
		}
		if !n.proc.Alive() {
			c.cfg.logf("chaos: heal: restarting %s", n.Name)
			if err := c.restartNode(ctx, n, nil); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, n := range c.nodes {
		if err := c.waitServing(ctx, n, 0, time.Minute); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *Cluster) initialCluster() string {
	var initial []string
	for _, m := range c.members {
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	return strings.Join(initial, ",")
}

func (c *Cluster) forwardClean(n *Node) {
	for _, p := range append([]*tcpproxy.Proxy{n.ingress}, n.etcd...) {
		if p == nil {
			continue
		}
		p.SetMode(tcpproxy.Forward)
		p.SetDelays(0, 0)
		p.SetDuplicateRate(0)
		p.SetCorruptRate(0)
	}
}

// Close stops every process (nodes together, then the members) and closes
// the proxies and clients. The error lists processes that had to be killed.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	for _, cl := range c.clients {
		cl.Close()
	}
	for _, cc := range c.conns {
		cc.Close()
	}
	c.mu.Unlock()
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		if n.proc == nil {
			continue
		}
		wg.Go(func() {
			if err := n.proc.Stop(20 * time.Second); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, n := range c.nodes {
		if n.ingress != nil {
			n.ingress.Close()
		}
		for _, p := range n.etcd {
			p.Close()
		}
	}
	if c.etcd != nil {
		c.etcd.Close()
	}
	for _, m := range c.members {
		if m.proc == nil {
			continue
		}
		wg.Go(func() {
			if err := m.proc.Stop(20 * time.Second); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	c.hc.CloseIdleConnections()
	return errors.Join(errs...)
}

// etcdFigures: the members' HashKV agree at the end (etcd's own end-of-test
// check); a mismatch is a report error.
func (c *Cluster) etcdFigures(ctx context.Context) []verify.Figure {
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := etcdfault.HashKVEqual(hctx, c.EtcdEndpoints(), 0); err != nil {
		return []verify.Figure{{Name: "etcd", Value: "HashKV differ: " + err.Error()}}
	}
	return []verify.Figure{{Name: "etcd", Value: fmt.Sprintf("%d member(s), HashKV equal at the end", len(c.members))}}
}

// MakeGroup implements verify.GroupMaker: the group is created on the next
// node in turn, and every member joins it there (created as a member when
// it has no record yet).
func (c *Cluster) MakeGroup(ctx context.Context, group string, members []string) error {
	c.mu.Lock()
	n := c.nodes[c.groupTurn%len(c.nodes)]
	c.groupTurn++
	c.mu.Unlock()
	a, err := c.Admin(n.Address)
	if err != nil {
		return err
	}
	if _, err := a.CreateGroup(ctx, &pb.GroupCommand{Group: group}); err != nil {
		return fmt.Errorf("chaos: create %s on %s: %w", group, n.Name, err)
	}
	for _, m := range members {
		if _, err := a.JoinGroup(ctx, &pb.GroupCommand{Group: group, Actor: m}); err != nil {
			return fmt.Errorf("chaos: %s joins %s: %w", m, group, err)
		}
	}
	return nil
}

// CertDir holds the cluster's certificates (Config.TLS): ca.crt, n1.crt,
// e1.crt, admin.crt, operator.crt, viewer.crt, etcd-root.crt, … and keys.
func (c *Cluster) CertDir() string { return filepath.Join(c.cfg.WorkDir, "certs") }

func (c *Cluster) certFile(name string) string { return filepath.Join(c.CertDir(), name) }

// Files are the certificate files of name (a node, a member, or admin,
// operator, viewer) with the cluster CA.
func (c *Cluster) Files(name string) mtls.Files {
	return mtls.Files{CA: c.certFile("ca.crt"), Cert: c.certFile(name + ".crt"), Key: c.certFile(name + ".key")}
}

// EtcdAccess is how a client with etcd user certificate name (etcd-root,
// etcd-node, etcd-locationd) reaches the cluster's etcd; without TLS, the
// plain endpoints.
func (c *Cluster) EtcdAccess(name string) mtls.Etcd {
	e := mtls.Etcd{Endpoints: c.EtcdEndpoints()}
	if c.cfg.TLS {
		e.CACert, e.Cert, e.Key = c.certFile("ca.crt"), c.certFile(name+".crt"), c.certFile(name+".key")
	}
	return e
}

// scheme of every URL: https:// with TLS.
func (c *Cluster) scheme() string {
	if c.cfg.TLS {
		return "https://"
	}
	return "http://"
}

// makeCerts makes the CA and every certificate, and the clients' TLS.
func (c *Cluster) makeCerts() error {
	var nodes, members []string
	for i := range c.cfg.Nodes {
		nodes = append(nodes, fmt.Sprintf("n%d", i+1))
	}
	for i := range c.cfg.EtcdMembers {
		members = append(members, fmt.Sprintf("e%d", i+1))
	}
	if _, err := mtls.Init(c.CertDir(), mtls.InitOptions{Nodes: nodes, Locationd: members}); err != nil {
		return err
	}
	r, err := mtls.Load(c.Files("admin"))
	if err != nil {
		return err
	}
	c.adminTLS = r
	c.hc.Transport = &http.Transport{TLSClientConfig: r.ClientConfig(mtls.WantRole(mtls.RoleLocationd))}
	return nil
}

// Secured reports whether the cluster runs with TLS (Config.TLS).
func (c *Cluster) Secured() bool { return c.cfg.TLS }

// API is the base URL of member i's location API.
func (c *Cluster) API(i int) string { return c.scheme() + c.members[i].HTTP }
