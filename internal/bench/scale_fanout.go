package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/meshloc/meshloc/internal/embedetcd"
	"github.com/meshloc/meshloc/internal/fanout"
	"github.com/meshloc/meshloc/internal/freeport"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node"
)

// scaleFanout is the scale section's fanout part: what one relocation
// costs etcd (its CPU: etcd is a child process) while p.Followers[0], then
// p.Followers[1], location caches follow every record, as nodes' caches do
// (authority.Cache, each with its own etcd client and its freshness
// barrier every TTL/4). The figure has the caches follow etcd through a
// watch fan-out (internal/fanout, in this process, as `locationd
// watch-proxy` runs it); the extra measures have them straight on etcd,
// as without one. Two nodes of this process move objects between them
// (their own two caches follow etcd directly in every window). The windows
// of the four settings alternate, twice, so that load from elsewhere on a
// shared machine falls on all of them.
func (x *run) scaleFanout(p ScalePlan) error {
	dir, err := os.MkdirTemp(x.dir, "scale-fanout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cu, err1 := freeport.Addr()
	pu, err2 := freeport.Addr()
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	x.step("scale: fanout: etcd in a process of its own, nodes n1 and n2, a watch fan-out")
	e, err := startChild(x.ctx, "etcd", embedetcd.Config{Name: "fanout", Dir: filepath.Join(dir, "etcd"), ClientURL: "http://" + cu, PeerURL: "http://" + pu, LogLevel: "fatal"})
	if err != nil {
		return err
	}
	defer e.stop(30 * time.Second)
	ecfg := clientv3.Config{Endpoints: []string{"http://" + cu}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	m := &mesh{dir: dir, ecfg: ecfg, nodes: map[string]*node.Node{}, metrics: map[string]*prometheus.Registry{}}
	defer m.close()
	if m.ec, err = clientv3.New(ecfg); err != nil {
		return err
	}
	hub, stopHub, err := serveFanout(m.ec)
	if err != nil {
		return err
	}
	defer stopHub()
	for _, name := range []string{"n1", "n2"} {
		if err := startNodeOn(x.ctx, m, ecfg.Endpoints, name); err != nil {
			return err
		}
	}
	if m.direct, err = client.New(x.ctx, client.Config{Nodes: []string{m.nodes["n1"].Address()}, Timeout: time.Minute}); err != nil {
		return err
	}
	objs := make([]*owned, 16)
	for i := range objs {
		if objs[i], err = m.create(x.ctx, fmt.Sprintf("actor/counter/fanout-%d", i), "add", "1"); err != nil {
			return err
		}
	}

	type setting struct {
		name      string
		followers int
		via       string // the fan-out's address, or "" (straight on etcd)
		cpu       time.Duration
		ok, fail  int64
		el        time.Duration
	}
	name := func(k int, via string) string {
		if via == "" {
			return fmt.Sprintf("etcd CPU per relocation, %d location caches straight on etcd", k)
		}
		return fmt.Sprintf("etcd CPU per relocation, %d location caches through the watch fan-out", k)
	}
	var set []*setting
	for _, via := range []string{hub, ""} {
		for _, k := range p.Followers {
			set = append(set, &setting{name: name(k, via), followers: k, via: via})
		}
	}
	win := 3 * x.cfg.Plan.Window
	x.step("scale: fanout: relocations between n1 and n2, 16 in flight, while %d then %d caches follow, through the fan-out and straight on etcd: 2 windows of %s each", p.Followers[0], p.Followers[1], win/2)
	for range 2 {
		for _, s := range set {
			fs, err := startFollowers(x.ctx, ecfg, s.via, s.followers)
			if err != nil {
				return err
			}
			before, err1 := e.cpu()
			ok, fail, el, _ := concurrent(len(objs), win/2, func(w int) error {
				_, err := m.move(x.ctx, objs[w])
				return err
			})
			after, err2 := e.cpu()
			fs.close()
			if err := errors.Join(err1, err2); err != nil {
				return err
			}
			s.cpu += after - before
			s.ok, s.fail, s.el = s.ok+ok, s.fail+fail, s.el+el
		}
	}
	measure := func(s *setting) Measure {
		m := Measure{Name: s.name, Unit: "ms", N: s.ok, Note: fmt.Sprintf("%.0f relocations/s", float64(s.ok)/s.el.Seconds())}
		if s.ok > 0 {
			m.Value = ms(s.cpu / time.Duration(s.ok))
		}
		if s.fail > 0 {
			m.Note += ", " + failedNote(s.fail)
		}
		return m
	}
	x.base(measure(set[0]))
	x.fig(measure(set[1]), set[0].name, le(1.5))
	x.base(measure(set[2]))
	x.fig(measure(set[3]), set[2].name, nil)
	return nil
}

// serveFanout serves a watch fan-out of the default cluster's records in
// front of etcd c, on a loopback port; it returns its URL.
func serveFanout(c *clientv3.Client) (string, func(), error) {
	keys := keyspace.Default()
	hub, err := fanout.New(c, fanout.Options{Ranges: []fanout.Range{
		fanout.Prefix(keys.AuthorityPrefix()), fanout.Prefix(keys.OwnersPrefix())}}, zerolog.Nop())
	if err != nil {
		return "", nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		hub.Close()
		return "", nil, err
	}
	g := grpc.NewServer()
	hub.Register(g)
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.Serve(lis) })
	return "http://" + lis.Addr().String(), func() { g.Stop(); wg.Wait(); hub.Close() }, nil
}

// startNodeOn starts a node of m, as mesh.startNode does, on the etcd of
// endpoints.
func startNodeOn(ctx context.Context, m *mesh, endpoints []string, name string) error {
	reg := actor.NewRegistry()
	if err := builtin.Register(reg); err != nil {
		return err
	}
	cfg := node.DefaultConfig()
	cfg.Name, cfg.EtcdEndpoints = name, endpoints
	cfg.Listen, cfg.HTTP = "127.0.0.1:0", ""
	cfg.RelocationTimeout = time.Minute
	cfg.BackgroundLatencyTarget = 0 // moves start when asked
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

// followers are location caches that follow every record, each as a
// node's: its own etcd client (and its own client of the fan-out), its
// freshness barrier every TTL/4.
type followers struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	clients []*clientv3.Client
}

// startFollowers starts n caches on etcd (through the fan-out at via when
// not empty) and returns once each has loaded.
func startFollowers(ctx context.Context, ecfg clientv3.Config, via string, n int) (*followers, error) {
	cctx, cancel := context.WithCancel(ctx)
	f := &followers{cancel: cancel}
	every := node.DefaultConfig().LeaseTTL / 4
	var caches []*authority.Cache
	for range n {
		c, err := clientv3.New(ecfg)
		if err != nil {
			f.close()
			return nil, err
		}
		f.clients = append(f.clients, c)
		var opts []authority.CacheOption
		if via != "" {
			wcfg := ecfg
			wcfg.Endpoints = []string{via}
			w, err := clientv3.New(wcfg)
			if err != nil {
				f.close()
				return nil, err
			}
			f.clients = append(f.clients, w)
			opts = append(opts, authority.WatchVia(w))
		}
		cache := authority.NewCache(c, keyspace.Default(), opts...)
		caches = append(caches, cache)
		f.wg.Go(func() { _ = cache.Run(cctx) })
		f.wg.Go(func() { cache.KeepFresh(cctx, every) })
	}
	for _, c := range caches {
		select {
		case <-c.Ready():
		case <-ctx.Done():
			f.close()
			return nil, ctx.Err()
		}
	}
	return f, nil
}

func (f *followers) close() {
	f.cancel()
	f.wg.Wait()
	for _, c := range f.clients {
		c.Close()
	}
}
