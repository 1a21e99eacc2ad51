package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/internal/etcdfault"
	"github.com/meshloc/meshloc/internal/tcpproxy"
	"github.com/meshloc/meshloc/internal/verify"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/mtls"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
	"github.com/meshloc/meshloc/pkg/wire/transport"
)

// What a running cluster offers its runs: addresses, clients, its members
// and nodes, relocations, execution logs, healing, certificates, Close.

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
	if snap.Record.Asleep() {
		return nil, status.Error(codes.FailedPrecondition, object+" is asleep: no node holds it")
	}
	a, err := c.Admin(snap.Record.Node.Address)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	// Foreground: a checked run moves objects as often as it asks, whatever
	// the nodes' calls; its relocations are what it checks.
	return a.Relocate(ctx, &pb.RelocateCommand{Object: object, Target: target, TimeoutMs: c.cfg.RelocationTimeout.Milliseconds(), Foreground: true})
}

// RelocateMany asks the owner that hosts most of objects, as etcd names
// them, to move those it hosts to target as bulk moves (foreground, as
// Relocate); target itself is never that owner.
func (c *Cluster) RelocateMany(ctx context.Context, objects []string, target string) ([]*pb.BulkOutcome, error) {
	var objs []keyspace.Object
	for _, o := range objects {
		obj, err := keyspace.ParseObject(o)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		objs = append(objs, obj)
	}
	v, err := c.store.ReadMany(ctx, objs, nil)
	if err != nil {
		return nil, status.Error(codes.Unavailable, "authority: "+err.Error())
	}
	by := map[string][]string{}
	addr := map[string]string{}
	best := ""
	for _, o := range objects {
		snap, ok := v.Objects[o]
		if !ok || snap.Record.Asleep() || snap.Record.Owner.ID == target {
			continue
		}
		id := snap.Record.Owner.ID
		by[id] = append(by[id], o)
		addr[id] = snap.Record.Node.Address
		if best == "" || len(by[id]) > len(by[best]) {
			best = id
		}
	}
	if best == "" {
		return nil, status.Error(codes.FailedPrecondition, "none of the objects is hosted away from "+target)
	}
	a, err := c.Admin(addr[best])
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	res, err := a.RelocateMany(ctx, &pb.RelocateManyCommand{Objects: by[best], Target: target,
		TimeoutMs: c.cfg.RelocationTimeout.Milliseconds(), Foreground: true})
	if err != nil {
		return nil, err
	}
	return res.GetOutcomes(), nil
}

// ExecLogs reads every node's execution log, a moment after it is asked
// (after the final reads): a reminder firing that gave up on a slow wake
// (a claim held past its timeout) runs right behind the final read that
// woke its object, and its line must be in.
func (c *Cluster) ExecLogs(ctx context.Context) (map[string][]verify.ExecEntry, error) {
	t := time.NewTimer(2 * time.Second)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
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
	defer c.hc.CloseIdleConnections() // after the processes: the API's keep-alive connections
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
	c.stopPostgres()
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
// etcd-node-n1, etcd-locationd) reaches the cluster's etcd; without TLS, the
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
	var members []string
	nodes := c.nodeNames()
	for i := range c.cfg.EtcdMembers {
		members = append(members, fmt.Sprintf("e%d", i+1))
	}
	if _, err := mtls.Init(c.CertDir(), mtls.InitOptions{Nodes: nodes, Locationd: members}); err != nil {
		return err
	}
	// An empty revocation list every process reads (--crl-file): tests
	// revoke into it (mtls.Revoke) and Reload.
	if _, err := mtls.Revoke(c.CertDir(), nil, 0); err != nil {
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

// Reload sends SIGHUP to every running locationd and meshnode: they read
// their certificates and the revocation list again.
func (c *Cluster) Reload() error {
	var procs []*Process
	for _, m := range c.members {
		procs = append(procs, m.proc)
	}
	for _, n := range c.nodes {
		procs = append(procs, n.proc)
	}
	for _, p := range procs {
		if p != nil && p.Alive() {
			if err := p.Signal(syscall.SIGHUP); err != nil {
				return err
			}
		}
	}
	return nil
}

// nodeNames are the names of the cluster's nodes (n1, n2, …).
func (c *Cluster) nodeNames() []string {
	var nodes []string
	for i := range c.cfg.Nodes {
		nodes = append(nodes, fmt.Sprintf("n%d", i+1))
	}
	return nodes
}

// Secured reports whether the cluster runs with TLS (Config.TLS).
func (c *Cluster) Secured() bool { return c.cfg.TLS }

// API is the base URL of member i's location API.
func (c *Cluster) API(i int) string { return c.scheme() + c.members[i].HTTP }
