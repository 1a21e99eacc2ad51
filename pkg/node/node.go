package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/meshloc/meshloc/internal/etcdalarm"
	"github.com/meshloc/meshloc/internal/notify"
	"github.com/meshloc/meshloc/internal/secpolicy"
	"github.com/meshloc/meshloc/internal/shrink"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/mtls"
	"github.com/meshloc/meshloc/pkg/node/execlog"
	"github.com/meshloc/meshloc/pkg/node/gateway"
	"github.com/meshloc/meshloc/pkg/node/groupcmd"
	"github.com/meshloc/meshloc/pkg/node/internal/hosted"
	"github.com/meshloc/meshloc/pkg/node/nodemetrics"
	"github.com/meshloc/meshloc/pkg/node/pacing"
	"github.com/meshloc/meshloc/pkg/node/peers"
	"github.com/meshloc/meshloc/pkg/node/reloclog"
	"github.com/meshloc/meshloc/pkg/node/routing"
	"github.com/meshloc/meshloc/pkg/node/stages"
	"github.com/meshloc/meshloc/pkg/statestore"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
	"github.com/meshloc/meshloc/pkg/wire/transport"
)

// Node is one meshnode: an owner that hosts objects and a gateway that routes
// calls to their owners.
type Node struct {
	cfg   Config
	opts  options
	log   zerolog.Logger
	reg   *actor.Registry
	clock clock.Clock
	keys  keyspace.Keys

	etcd     *clientv3.Client
	ownEtcd  bool
	state    statestore.Store // durable objects' state (hosting.go)
	watch    *clientv3.Client // the watch fan-out's client (EtcdWatchEndpoints), or nil
	store    *authority.Store
	cache    *authority.Cache
	dir      *lease.Directory
	keeper   *lease.Keeper
	rid      wire.RoutingID
	self     authority.OwnerRef
	selfNode authority.NodeRef
	hosts    map[string]bool // types this node hosts

	mu      sync.Mutex
	objects map[string]*hosted.Object
	peak    shrink.Peak    // of objects: rebuilt once mostly asleep (forget)
	types   sync.Map       // type name → *actor.Type (typeRef)
	changes notify.Changes // of objects: noted under mu (noteChangeLocked)
	closing bool

	fences *routing.Fences // newest fence seen per object (gateway)
	router *routing.Router // where a call goes (route.go; made at Start)

	// relocations (source.go, target.go, routes.go, budget.go, status.go)
	routes       *hosted.Routes
	budgets      *stages.Budgets
	relocs       *reloclog.Log
	events       reloclog.Hub // WatchEvents (events.go)
	relocMetrics *reloclog.Metrics
	gw           *gateway.Gateway // sessions this node holds as their gateway (session_gateway.go)
	tombstones   *stages.Tombstones
	incoming     stages.Incoming
	draining     atomic.Bool
	serving      atomic.Bool     // advertised serving (Start), for health.go
	health       *health.Server  // grpc.health.v1 (health.go)
	stopping     chan struct{}   // closed when Stop begins
	stopCtx      context.Context // ends when Stop begins
	stopCancel   context.CancelFunc
	seams        seams           // the relocator's seams (faults in test builds: faults_on.go)
	drain        drainState      // drain.go
	groups       groupcmd.Locks  // groups.go
	joins        *reloclog.Joins // Actor Join profiles (join.go)

	moved      *routing.Moved // where objects that left went, for stragglers
	pacing     *pacing.Pacing
	peerPacing pacing.Peers // what this node believes of its targets' pacing
	// messages between objects (internal/hosted; traffic.go)
	outboxes *hosted.OutboxSet
	env      *hosted.Env // what the objects share (hosting.go; made at Start)
	traffic  *hosted.Traffic
	peers    *peers.Pool
	tls      *mtls.Reloader // nil: plaintext (no TLS flags)
	grpc     *grpc.Server
	lis      net.Listener
	httpSrv  *http.Server
	metrics  *nodemetrics.Node
	alarms   *etcdalarm.Monitor // etcd's alarms (etcdspace.go)
	xlog     *execlog.Log       // execution log (--exec-log); nil: off

	bg sync.WaitGroup // background loops (cache, directory, servers)
	// detached relocations (RelocateOptions.Detach) in flight.
	detached sync.WaitGroup
	work     sync.WaitGroup // mailbox drains, timers, relays
	// activations in flight (hostedOrActivate): they end before the
	// objects are dropped.
	activating sync.WaitGroup
	// life is the node's context from Start until its teardown ends the
	// background loops: relays and target stages run within it.
	life    context.Context
	cancel  context.CancelFunc
	stopped chan struct{}
}

// New validates cfg and applies opts (WithRegistry is required); nothing
// runs until Start.
func New(cfg Config, opt ...Option) (*Node, error) {
	var opts options
	for _, o := range opt {
		o(&opts)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Registry == nil {
		return nil, fmt.Errorf("%w: no type registry", ErrInvalidConfig)
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real()
	}
	keys, err := keyspace.New(cfg.Prefix, cfg.Cluster)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	hosts := map[string]bool{}
	types := cfg.Types
	if len(types) == 0 {
		types = opts.Registry.Names()
	}
	for _, t := range types {
		if _, err := opts.Registry.Lookup(t); err != nil {
			return nil, fmt.Errorf("%w: --types: %v", ErrInvalidConfig, err)
		}
		hosts[t] = true
	}
	n := &Node{
		cfg: cfg, opts: opts, log: opts.Logger.With().Str("node", cfg.Name).Logger(),
		reg: opts.Registry, clock: opts.Clock, keys: keys, rid: wire.NewRoutingID(), hosts: hosts,
		objects: map[string]*hosted.Object{}, fences: routing.NewFences(acceptOlderFence), moved: routing.NewMoved(cfg.ForwardWindow),
		stopped: make(chan struct{}), stopping: make(chan struct{}),
		routes: hosted.NewRoutes(), budgets: stages.NewBudgets(cfg.NodeBudgetBytes, cfg.PeerBudgetBytes),
		tombstones: stages.NewTombstones(1024), outboxes: &hosted.OutboxSet{},
	}
	reg := opts.Metrics
	if reg == nil {
		reg = prometheus.NewRegistry()
		// The GC's own figures include go_gc_heap_live_bytes, the heap
		// that survived the last collection: what refused work must give
		// back (test/hostile measures it).
		reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsGC)),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	n.relocs = reloclog.NewLog(&n.events, n.noteChange)
	n.metrics = nodemetrics.New(reg)
	n.joins = reloclog.NewJoins(n.metrics.JoinCleanups, n.now)
	n.relocMetrics = &reloclog.Metrics{Chunks: n.metrics.Chunks, Bytes: n.metrics.Bytes, Interruption: n.metrics.Interruption, Relocations: n.metrics.Relocations}
	n.pacing = pacing.New(cfg.Pacing(), pacing.Deps{Clock: n.clock, Log: n.log, Metrics: reg,
		Draining: n.draining.Load, Stopping: n.stopping, ErrStopping: ErrStopping})
	n.traffic = hosted.NewTraffic(cfg.TrafficEdges, cfg.TrafficHalfLife, cfg.TrafficSample)
	n.metrics.Messages = nodemetrics.RegisterMessages(reg, nil, outboxGauges{n})
	n.peers = peers.New()
	n.stopCtx, n.stopCancel = context.WithCancel(context.Background())
	n.life = context.Background()
	return n, nil
}

// now is the node's clock's time.
func (n *Node) now() time.Time { return n.clock.Now() }

// ReloadTLS reads the node's certificate and key again (SIGHUP): new
// connections use the renewed certificate; connections open now, and the
// relocations on them, go on. A node without TLS has nothing to reload.
func (n *Node) ReloadTLS() error {
	if n.tls == nil {
		return nil
	}
	return n.tls.Reload()
}

// Self is the owner pair of the running node.
func (n *Node) Self() authority.OwnerRef { return n.self }

// Address is the advertised gRPC address.
func (n *Node) Address() string { return n.selfNode.Address }

// Keeper is the node's lease keeper.
func (n *Node) Keeper() *lease.Keeper { return n.keeper }

// Store is the node's authority store.
func (n *Node) Store() *authority.Store { return n.store }

// Hosted is the number of objects hosted here.
func (n *Node) Hosted() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.objects)
}

var errNotSeenServing = errors.New("its own owner directory did not show it serving in time (is its watch path up?)")

// Start connects to etcd, takes the owner key (bound to a new lease), serves
// gRPC (calls, the peer protocol, admin) and HTTP (/metrics, /healthz,
// /readyz), and advertises the node as serving once its location cache and
// owner directory are loaded. It returns once the node serves and its own
// directory has seen it serving (a call placed then lands here; OnReady
// ran), or with an error, ctx's included: then nothing is left running and
// the Node cannot be started again. Call it once.
func (n *Node) Start(ctx context.Context) (err error) {
	bgctx, cancel := context.WithCancel(context.Background())
	n.life, n.cancel = bgctx, cancel
	defer func() {
		if err != nil {
			n.teardown(context.Background())
		}
	}()
	if n.cfg.TLSFiles().Enabled() {
		if n.tls, err = mtls.Load(n.cfg.TLSFiles()); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		if id := n.tls.Identity(); id != (mtls.Identity{Role: mtls.RoleNode, Name: n.cfg.Name}) {
			return fmt.Errorf("node: %s names %s, not node %s", n.cfg.CertFile, id, n.cfg.Name)
		}
		n.peers.Secure(n.tls)
	}
	n.etcd = n.opts.Etcd
	if n.etcd == nil {
		ecfg, err := n.cfg.Etcd().ClientConfig()
		if err != nil {
			return fmt.Errorf("node: etcd: %w", err)
		}
		// A durable object's write carries up to --durable-max-bytes
		// (the client's default send limit is 2 MiB).
		ecfg.MaxCallSendMsgSize = max(2<<20, n.cfg.DurableMaxBytes+64<<10)
		if n.etcd, err = clientv3.New(ecfg); err != nil {
			return fmt.Errorf("node: etcd: %w", err)
		}
		n.ownEtcd = true
	}
	n.store = authority.New(n.etcd, n.keys)
	if n.cfg.BatchWrites {
		n.store = n.store.Batched(authority.Limits{MaxTxnOps: n.cfg.MaxTxnOps, MaxRequestBytes: n.cfg.MaxRequestBytes})
	}
	n.seams = withFaults(n.plainSeams())
	var cacheOpts []authority.CacheOption
	var dirOpts []lease.DirectoryOption
	if len(n.cfg.EtcdWatchEndpoints) > 0 {
		wcfg, err := n.cfg.EtcdWatch().ClientConfig()
		if err != nil {
			return fmt.Errorf("node: etcd watch: %w", err)
		}
		if n.watch, err = clientv3.New(wcfg); err != nil {
			return fmt.Errorf("node: etcd watch: %w", err)
		}
		cacheOpts = append(cacheOpts, authority.WatchVia(n.watch))
		dirOpts = append(dirOpts, lease.WatchVia(n.watch))
	}
	if n.tls != nil {
		dirOpts = append(dirOpts, lease.RequireTLS())
	}
	// A plaintext node does not join a secured cluster (its callers would
	// need no certificate).
	if err := secpolicy.Enforce(ctx, n.etcd, n.keys, n.tls != nil, "node "+n.cfg.Name); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.cache = authority.NewCache(n.etcd, n.keys, cacheOpts...)
	n.dir = lease.NewDirectory(n.etcd, n.keys, dirOpts...)
	n.followAlarms(bgctx) // etcdspace.go
	// Before the cache runs: no change of a hosted object goes unseen.
	sub := n.cache.Subscribe(n.isHosted)
	n.spawnBG(func() { n.watchOwnership(bgctx, sub) })
	n.spawnBG(func() { _ = n.cache.Run(bgctx) })
	n.spawnBG(func() { n.cache.KeepFresh(bgctx, max(n.cfg.LeaseTTL/4, 250*time.Millisecond)) })
	n.spawnBG(func() { _ = n.dir.Run(bgctx) })

	n.lis = n.opts.Listener
	if n.lis == nil {
		if n.lis, err = net.Listen("tcp", n.cfg.Listen); err != nil {
			return fmt.Errorf("node: listen %s: %w", n.cfg.Listen, err)
		}
	}
	addr := n.cfg.Advertise
	if _, port, _ := net.SplitHostPort(addr); addr == "" || port == "0" || n.opts.Listener != nil && addr == n.cfg.Listen {
		addr = n.lis.Addr().String() // --listen 127.0.0.1:0: the port the system chose
	}
	n.selfNode = authority.NodeRef{RoutingID: n.rid.Hex(), Address: addr}

	types := make([]string, 0, len(n.hosts))
	for t := range n.hosts {
		types = append(types, t)
	}
	slices.Sort(types)
	lcfg := lease.DefaultConfig()
	lcfg.OwnerID = n.cfg.Name
	lcfg.TTL = n.cfg.LeaseTTL
	lcfg.Margin = n.cfg.LeaseMargin
	lcfg.AcquireWait = n.cfg.AcquireWait
	lcfg.Logger = n.log
	lcfg.Clock = n.clock
	lcfg.Descriptor = lease.Descriptor{
		OwnerID: n.cfg.Name, RoutingID: n.rid.Hex(), Address: addr, State: lease.StateJoining,
		Weight: n.cfg.Weight, ApplicationVersion: n.cfg.ApplicationVersion, Types: types,
		StartedUnixMs: n.now().UnixMilli(), HTTP: cmp.Or(n.cfg.AdvertiseHTTP, n.cfg.HTTP), TLS: n.tls != nil, BulkIntents: true,
	}
	n.keeper, err = lease.Start(ctx, n.etcd, n.keys, lcfg)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.self = authority.OwnerRef{ID: n.cfg.Name, Generation: n.keeper.Generation()}
	n.router = n.newRouter()
	if n.cfg.ExecLog != "" {
		if n.xlog, err = execlog.Open(n.cfg.ExecLog, n.self, n.log, n.metrics.ExecLogErrors); err != nil {
			return err
		}
	}
	if n.env, err = n.hostEnv(); err != nil {
		return err
	}

	sopts := append(transport.ServerOptions(),
		// (Flow-control windows and buffers: transport.ServerOptions.)
		grpc.MaxRecvMsgSize(n.cfg.MaxGRPCMessageBytes()), grpc.MaxSendMsgSize(wire.MaxMessageBytes),
		grpc.MaxConcurrentStreams(uint32(n.cfg.GRPCMaxStreams)))
	if n.tls != nil {
		sopts = append(append(sopts, grpc.Creds(n.tls.ServerCredentials())), mtls.Authorizer(rpcAction).ServerOptions()...)
	}
	n.grpc = grpc.NewServer(sopts...)
	n.gw = n.newGateway()
	rpcpb.RegisterCallServiceServer(n.grpc, &callServer{n: n})
	rpcpb.RegisterPeerServiceServer(n.grpc, &peerServer{n: n})
	rpcpb.RegisterAdminServiceServer(n.grpc, &adminServer{n: n})
	rpcpb.RegisterSessionServiceServer(n.grpc, &sessionServer{n: n})
	n.registerHealth(n.grpc)
	n.spawnBG(func() { _ = n.grpc.Serve(n.lis) })

	if n.cfg.HTTP != "" && n.opts.Metrics == nil {
		hl, err := net.Listen("tcp", n.cfg.HTTP)
		if err != nil {
			return fmt.Errorf("node: listen http %s: %w", n.cfg.HTTP, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(n.metrics.Reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			if st := n.keeper.Status(n.now()); st != lease.Valid {
				http.Error(w, "lease "+st.String(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		mux.HandleFunc("/readyz", n.readyz) // etcdspace.go
		n.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		n.spawnBG(func() { _ = n.httpSrv.Serve(hl) })
	}

	for _, ch := range []<-chan struct{}{n.cache.Ready(), n.dir.Ready()} {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.keeper.Done():
			return fmt.Errorf("node: lease ended during start: %w", n.keeper.Err())
		}
	}
	n.syncPeersOnce() // before serving: forwards dial only live owners' addresses
	if _, err := n.keeper.Update(ctx, func(d *lease.Descriptor) { d.State = lease.StateServing }); err != nil {
		return fmt.Errorf("node: advertise serving: %w", err)
	}
	actx, stopWait := context.WithTimeoutCause(ctx, max(10*time.Second, 2*n.cfg.LeaseTTL), errNotSeenServing)
	err = n.dir.AwaitServing(actx, n.self.ID, n.self.Generation, n.keeper.Done())
	if stopWait(); err != nil {
		return fmt.Errorf("node: start: %w", err)
	}
	n.serving.Store(true)
	n.updateHealth()
	n.spawnBG(func() { n.watchFence(bgctx) })
	n.spawnBG(func() { n.syncPeers(bgctx) })
	n.spawnBG(func() { n.sweep(bgctx) })
	n.spawnBG(func() { n.fireReminders(bgctx) }) // reminders.go
	if n.pacing.Enabled() {
		n.spawnBG(func() { n.pacing.Run(bgctx) })
	}
	n.log.Info().Str("address", addr).Int64("generation", n.self.Generation).Str("routingId", n.rid.Hex()).Msg("serving")
	if n.opts.onReady != nil {
		n.opts.onReady()
	}
	return nil
}

func (n *Node) spawnBG(f func()) { n.bg.Go(f) }

// watchFence stops serving when the lease ends: a fenced owner never serves
// again (it must restart as a new generation).
func (n *Node) watchFence(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-n.Fenced():
		n.updateHealth()
		if errors.Is(n.keeper.Err(), lease.ErrClosed) {
			return // a clean stop
		}
		n.log.Error().Err(n.keeper.Err()).Msg("lease ended: fenced, hosted objects dropped")
		n.dropAll()
	}
}

func (n *Node) dropAll() {
	hs := n.hostedObjects()
	n.mu.Lock()
	n.objects = map[string]*hosted.Object{}
	n.noteChangeLocked()
	n.mu.Unlock()
	for _, h := range hs {
		h.Close()
	}
	n.metrics.Hosted.Set(0)
}

// Run is Start, then Stop when ctx ends (or a drain asked through
// AdminService ends: StopRequested).
func (n *Node) Run(ctx context.Context) error {
	if err := n.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-n.StopRequested():
	case <-n.Fenced():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return n.Stop(sctx)
}

// Stop marks the node draining, stops serving (calls in flight finish,
// bounded by ctx: then their connections are closed), drops its objects
// and revokes its lease. Memory objects still hosted here lose their
// state: Drain first to move them away. Relocations in flight end as
// shutdown (a target stage whose commit is uncertain resolves it first).
// Stop returns after every goroutine of the node ended, with the first
// errors of closing its parts; a second call waits for the first and
// returns nil.
func (n *Node) Stop(ctx context.Context) error {
	n.mu.Lock()
	if n.closing {
		n.mu.Unlock()
		<-n.stopped
		return nil
	}
	n.closing = true
	n.mu.Unlock()
	n.updateHealth()
	n.drainJoins(ctx) // pending Actor Join clean-ups finish first (join.go)
	close(n.stopping)
	n.stopCancel()
	defer close(n.stopped)
	if n.keeper != nil && n.keeper.Err() == nil {
		uctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, _ = n.keeper.Update(uctx, func(d *lease.Descriptor) { d.State = lease.StateDraining })
		cancel()
	}
	return n.teardown(ctx)
}

func (n *Node) teardown(ctx context.Context) error {
	var errs []error
	if n.grpc != nil {
		done := make(chan struct{})
		go func() { n.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			n.grpc.Stop()
			<-done
		}
	} else if n.lis != nil {
		n.lis.Close()
	}
	if n.httpSrv != nil {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = n.httpSrv.Shutdown(sctx)
		cancel()
	}
	n.joins.Wait() // join sources end (they see stopping) before their objects are dropped
	n.detached.Wait()
	n.activating.Wait() // Stop cancelled them: they end soon
	n.dropAll()
	n.work.Wait()
	if n.xlog != nil {
		if err := n.xlog.Close(); err != nil {
			errs = append(errs, fmt.Errorf("node: --exec-log: %w", err))
		}
	}
	if n.keeper != nil {
		if err := n.keeper.Close(ctx); err != nil && !errors.Is(err, lease.ErrClosed) {
			errs = append(errs, err)
		}
	}
	if n.cancel != nil {
		n.cancel()
	}
	n.bg.Wait()
	n.peers.Close()
	if n.state != nil {
		errs = append(errs, n.state.Close())
	}
	if n.ownEtcd && n.etcd != nil {
		errs = append(errs, n.etcd.Close())
	}
	if n.watch != nil {
		errs = append(errs, n.watch.Close())
	}
	return errors.Join(errs...)
}

func fenceFromWire(f *pb.Fence) authority.Fence {
	return authority.Fence{
		Owner:            authority.OwnerRef{ID: f.GetOwnerId(), Generation: f.GetOwnerGeneration()},
		ObjectGeneration: f.GetObjectGeneration(), AuthorityGeneration: f.GetAuthorityGeneration(),
	}
}
