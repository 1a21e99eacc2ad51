// Package demo is `locationd demo`: an embedded etcd with locationd's API, three
// meshnodes in this process on loopback, and a live workload over the
// built-in types that checks every reply, printing one progress line at a
// time, while a relocator keeps moving the objects the workload uses between
// the nodes. It is meshloc's main job in one command.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/meshloc/meshloc/internal/locationd"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node"
)

// Config of the demo.
type Config struct {
	// Locationd is the config of the embedded location service. Its
	// EtcdLogLevel left at locationd's default "error" runs at "fatal" here:
	// the embedded etcd logs every cancelled read at error level (with a stack
	// trace), and the nodes cancel reads whenever a relocation ends, which
	// would bury the progress lines. Any other level is used as it is.
	Locationd locationd.Config
	// Nodes are the gRPC listen addresses of the in-process nodes.
	Nodes []string
	// NodeHTTP are the nodes' HTTP addresses (/metrics, /healthz), one per
	// node; empty: each node's gRPC port + 1 (7101, 7111, 7121 by default).
	NodeHTTP []string
	// Workers is the number of concurrent callers.
	Workers int
	// Objects per worker and type.
	Objects int
	// Duration of the workload; 0 runs until ctx ends.
	Duration time.Duration
	// Every is the interval between progress lines.
	Every time.Duration
	// LeaseTTL of the nodes.
	LeaseTTL time.Duration
	// Relocate (--relocations, default true) keeps moving objects while the
	// workload runs: up to RelocationsInFlight at a time, each a random object
	// the workers have used, moved by its owner to a node placement chooses.
	Relocate bool
	// ForegroundRelocations (--foreground-relocations): the relocator's
	// moves start at once, however busy the workers keep the nodes; by
	// default they are background relocations, paced while calls wait.
	ForegroundRelocations bool
}

// RelocationsInFlight bounds the relocator's concurrent relocations.
const RelocationsInFlight = 4

// DefaultConfig: nodes on 7100, 7110, 7120 (so `meshctl call --node
// 127.0.0.1:7100` reaches the demo), 8 workers.
func DefaultConfig() Config {
	return Config{
		Locationd: locationd.DefaultConfig(),
		Nodes:     []string{"127.0.0.1:7100", "127.0.0.1:7110", "127.0.0.1:7120"},
		Workers:   8,
		Objects:   16,
		Every:     2 * time.Second,
		LeaseTTL:  5 * time.Second,
		Relocate:  true,
	}
}

// stats of one interval (and in total).
type stats struct {
	calls, errors, wrong atomic.Int64
	mu                   sync.Mutex
	lat                  []time.Duration
}

func (s *stats) record(d time.Duration, err error) {
	s.calls.Add(1)
	if err != nil {
		s.errors.Add(1)
	}
	s.mu.Lock()
	s.lat = append(s.lat, d)
	s.mu.Unlock()
}

func (s *stats) take() (calls, errs int64, p50, p99 time.Duration) {
	s.mu.Lock()
	lat := s.lat
	s.lat = make([]time.Duration, 0, len(lat))
	s.mu.Unlock()
	slices.Sort(lat)
	if n := len(lat); n > 0 {
		p50, p99 = lat[n/2], lat[n*99/100]
	}
	return s.calls.Swap(0), s.errors.Swap(0), p50, p99
}

// Run runs the demo until cfg.Duration passes or ctx ends, then checks the
// final state of every object and returns an error if anything was wrong.
func Run(ctx context.Context, cfg Config, out io.Writer, log zerolog.Logger) error {
	if len(cfg.Nodes) == 0 || cfg.Workers <= 0 || cfg.Objects <= 0 {
		return errors.New("demo: need nodes, workers and objects")
	}
	nodeHTTP, err := httpAddrs(cfg.Nodes, cfg.NodeHTTP)
	if err != nil {
		return err
	}
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	bg, stopAll := context.WithCancel(context.Background())
	defer stopAll()
	if cfg.Locationd.EtcdLogLevel == locationd.DefaultConfig().EtcdLogLevel {
		cfg.Locationd.EtcdLogLevel = "fatal"
	}

	// 1. locationd with its embedded etcd.
	srv, err := locationd.New(cfg.Locationd, log.With().Str("service", "locationd").Logger())
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	lderr := make(chan error, 1)
	wg.Go(func() { lderr <- srv.Run(bg) })
	defer wg.Wait()
	defer stopAll()
	select {
	case <-srv.Ready():
	case err := <-lderr:
		return fmt.Errorf("demo: locationd: %w", err)
	case <-ctx.Done():
		return nil
	}
	eps := srv.EtcdEndpoints()
	fmt.Fprintf(out, "meshloc demo: dashboard http://%s/\n", srv.HTTPAddr())
	fmt.Fprintf(out, "  etcd %s, location API http://%s, %d nodes, %d workers\n",
		strings.Join(eps, ","), srv.HTTPAddr(), len(cfg.Nodes), cfg.Workers)

	// 2. The nodes.
	reg := actor.NewRegistry()
	if err := builtin.Register(reg); err != nil {
		return err
	}
	var nodes []*node.Node
	defer func() {
		for _, n := range nodes {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = n.Stop(sctx)
			cancel()
		}
	}()
	for i, addr := range cfg.Nodes {
		nc := node.DefaultConfig()
		nc.Name = fmt.Sprintf("n%d", i+1)
		nc.EtcdEndpoints = eps
		nc.Listen = addr
		nc.HTTP = nodeHTTP[i]
		nc.LeaseTTL = cfg.LeaseTTL
		nc.Prefix, nc.Cluster = cfg.Locationd.Prefix, cfg.Locationd.Cluster
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("demo: node %s: %w (is another meshnode or demo running?)", nc.Name, err)
		}
		// Each node serves its own /metrics and /healthz (a registry of its own).
		n, err := node.New(nc, node.WithRegistry(reg), node.WithListener(lis), node.WithLogger(log.With().Str("service", "meshnode").Logger()))
		if err != nil {
			lis.Close()
			return err
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = n.Start(sctx)
		cancel()
		if err != nil {
			return fmt.Errorf("demo: node %s: %w", nc.Name, err)
		}
		nodes = append(nodes, n)
		fmt.Fprintf(out, "  node %s serving on %s, http://%s/metrics (generation %d)\n", nc.Name, n.Address(), nc.HTTP, n.Self().Generation)
	}

	// 3. Clients: half route from etcd straight to owners, half through gateways.
	direct, err := client.New(ctx, client.Config{EtcdEndpoints: eps, Prefix: cfg.Locationd.Prefix, Cluster: cfg.Locationd.Cluster})
	if err != nil {
		return err
	}
	defer direct.Close()
	gateway, err := client.New(ctx, client.Config{Nodes: cfg.Nodes})
	if err != nil {
		return err
	}
	defer gateway.Close()
	fmt.Fprintf(out, "try (after make build): bin/meshctl call --node %s actor/counter/w0-c0 get   |   bin/meshctl objects   |   bin/meshctl relocations --watch\n", cfg.Nodes[0])

	ec, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer ec.Close()
	keys, err := keyspace.New(cfg.Locationd.Prefix, cfg.Locationd.Cluster)
	if err != nil {
		return err
	}
	store := authority.New(ec, keys)

	// 4. The workload, and the relocator moving what it uses.
	st := &stats{}
	total := &stats{}
	used := newTouched()
	var wwg sync.WaitGroup
	workers := make([]*worker, cfg.Workers)
	for i := range workers {
		c := direct
		if i%2 == 1 {
			c = gateway
		}
		workers[i] = newWorker(i, cfg.Objects, c, used)
		wwg.Go(func() { workers[i].run(ctx, st, total) })
	}
	rs := &relocStats{}
	if cfg.Relocate {
		r := &relocator{nodes: nodes, store: store, used: used, stats: rs, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11)),
			foreground: cfg.ForegroundRelocations}
		wwg.Go(func() { r.run(ctx) })
	}
	start := time.Now()
	tick := time.NewTicker(cfg.Every)
	defer tick.Stop()
	progress := func() {
		calls, errs, p50, p99 := st.take()
		secs := cfg.Every.Seconds()
		relocs := ""
		if cfg.Relocate {
			relocs = rs.progress(secs)
		}
		fmt.Fprintf(out, "[%5.0fs] %7.0f calls/s  p50 %6.2fms  p99 %6.2fms  errors %d  wrong %d%s  | %s\n",
			time.Since(start).Seconds(), float64(calls)/secs, ms(p50), ms(p99), errs, total.wrong.Load(), relocs, placement(ctx, store))
	}
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
			progress()
		}
	}
	wwg.Wait() // workers and relocator: every call and every relocation has ended

	// 5. Check every object's final state with a fresh read.
	vctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var bad []string
	for _, w := range workers {
		bad = append(bad, w.verify(vctx, direct)...)
	}
	el := time.Since(start)
	fmt.Fprintf(out, "done: %d calls in %.1fs (%.0f/s), %d errors, %d wrong replies, %d final-state mismatches\n",
		total.calls.Load(), el.Seconds(), float64(total.calls.Load())/el.Seconds(), total.errors.Load(), total.wrong.Load(), len(bad))
	if cfg.Relocate {
		fmt.Fprintln(out, rs.summary(el))
		for _, m := range rs.messages() {
			fmt.Fprintf(out, "  %s\n", m)
		}
	} else {
		fmt.Fprintln(out, "relocations: off")
	}
	for _, b := range bad {
		fmt.Fprintln(out, "  MISMATCH:", b)
	}
	if total.wrong.Load() > 0 || len(bad) > 0 {
		return fmt.Errorf("demo: %d wrong replies, %d final-state mismatches", total.wrong.Load(), len(bad))
	}
	return nil
}

// httpAddrs are the nodes' HTTP addresses: given, one per node, or each
// gRPC port + 1.
func httpAddrs(nodes, given []string) ([]string, error) {
	if len(given) > 0 {
		if len(given) != len(nodes) {
			return nil, fmt.Errorf("demo: %d HTTP addresses for %d nodes", len(given), len(nodes))
		}
		return given, nil
	}
	out := make([]string, len(nodes))
	for i, a := range nodes {
		host, port, err := net.SplitHostPort(a)
		p, perr := strconv.Atoi(port)
		if err != nil || perr != nil || p <= 0 || p >= 65535 {
			return nil, fmt.Errorf("demo: node address %q is not host:port with a port below 65535", a)
		}
		out[i] = net.JoinHostPort(host, strconv.Itoa(p+1))
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func placement(ctx context.Context, store *authority.Store) string {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	recs, _, err := store.List(rctx, authority.ListOptions{})
	if err != nil {
		return "objects ?"
	}
	per := map[string]int{}
	for _, r := range recs {
		per[r.Record.Owner.ID]++
	}
	ids := make([]string, 0, len(per))
	for id := range per {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b strings.Builder
	fmt.Fprintf(&b, "objects %d:", len(recs))
	for _, id := range ids {
		fmt.Fprintf(&b, " %s=%d", id, per[id])
	}
	return b.String()
}

// worker owns its objects, so it knows every expected reply.
type worker struct {
	id       int
	c        *client.Client
	counters []int64    // expected value per counter
	lists    [][]string // expected items per list
	bankTx   int
	bankOK   map[string]bool // acknowledged transfer ids
	rng      *rand.Rand
	used     *touched        // shared: the objects the relocator may move
	mine     map[string]bool // the objects this worker already put in used
}

func newWorker(id, objects int, c *client.Client, used *touched) *worker {
	return &worker{id: id, c: c, counters: make([]int64, objects), lists: make([][]string, objects),
		bankOK: map[string]bool{}, rng: rand.New(rand.NewPCG(uint64(id), 7)), used: used, mine: map[string]bool{}}
}

// touch records that name exists (a call to it succeeded).
func (w *worker) touch(name string) {
	if !w.mine[name] {
		w.mine[name] = true
		w.used.add(name)
	}
}

func (w *worker) name(typ string, i int) string {
	return fmt.Sprintf("actor/%s/w%d-%s%d", typ, w.id, typ[:1], i)
}

// run calls until stop ends. Each call has its own deadline, independent of
// stop, so no call is cut off: every outcome is known when the final state is
// checked.
func (w *worker) run(stop context.Context, st, total *stats) {
	for stop.Err() == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		i := w.rng.IntN(len(w.counters))
		t0 := time.Now()
		var err error
		var name string
		switch w.rng.IntN(3) {
		case 0:
			var r *client.Reply
			name = w.name("counter", i)
			r, err = w.c.Call(ctx, name, "add", "1")
			if err == nil {
				w.counters[i]++
				var v struct{ Value int64 }
				if json.Unmarshal(r.Payload, &v) != nil || v.Value != w.counters[i] {
					total.wrong.Add(1)
				}
			}
		case 1:
			item := fmt.Sprintf("%d", len(w.lists[i]))
			var r *client.Reply
			name = w.name("list", i)
			r, err = w.c.Call(ctx, name, "append", item)
			if err == nil {
				w.lists[i] = append(w.lists[i], item)
				var v struct{ Length int }
				if json.Unmarshal(r.Payload, &v) != nil || v.Length != len(w.lists[i]) {
					total.wrong.Add(1)
				}
			}
		default:
			w.bankTx++
			tx := fmt.Sprintf("w%d-t%d", w.id, w.bankTx)
			from, to := w.rng.IntN(8), w.rng.IntN(7)
			if to >= from {
				to++
			}
			name = fmt.Sprintf("actor/bank/w%d-b", w.id)
			_, err = w.c.Call(ctx, name, "transfer", fmt.Sprintf("a%d", from), fmt.Sprintf("a%d", to), "1", tx)
			if err == nil {
				w.bankOK[tx] = true
			} else if strings.Contains(err.Error(), "application_error") {
				err = nil // insufficient funds is a correct answer
			}
		}
		cancel()
		d := time.Since(t0)
		if err == nil {
			w.touch(name)
		}
		st.record(d, err)
		total.record(d, err)
	}
}

// verify reads every object once and compares with what was acknowledged.
func (w *worker) verify(ctx context.Context, c *client.Client) []string {
	var bad []string
	for i, want := range w.counters {
		if want == 0 {
			continue
		}
		r, err := c.Call(ctx, w.name("counter", i), "get")
		var v struct{ Value int64 }
		if err != nil || json.Unmarshal(r.Payload, &v) != nil || v.Value != want {
			bad = append(bad, fmt.Sprintf("%s: want %d, got %v %v", w.name("counter", i), want, v.Value, err))
		}
	}
	for i, want := range w.lists {
		if len(want) == 0 {
			continue
		}
		r, err := c.Call(ctx, w.name("list", i), "read")
		var v struct{ Items []string }
		if err != nil || json.Unmarshal(r.Payload, &v) != nil || !slices.Equal(v.Items, want) {
			bad = append(bad, fmt.Sprintf("%s: want %d items, got %d %v", w.name("list", i), len(want), len(v.Items), err))
		}
	}
	if w.bankTx > 0 {
		r, err := c.Call(ctx, fmt.Sprintf("actor/bank/w%d-b", w.id), "read")
		var v struct {
			Ledger []string
			Total  int64
		}
		if err != nil || json.Unmarshal(r.Payload, &v) != nil {
			return append(bad, fmt.Sprintf("bank w%d: %v", w.id, err))
		}
		seen := map[string]int{}
		for _, tx := range v.Ledger {
			seen[tx]++
		}
		for tx := range w.bankOK {
			if seen[tx] != 1 {
				bad = append(bad, fmt.Sprintf("bank w%d: acknowledged %s appears %d times", w.id, tx, seen[tx]))
			}
		}
		if v.Total != 800 {
			bad = append(bad, fmt.Sprintf("bank w%d: total %d, want 800", w.id, v.Total))
		}
	}
	return bad
}
