package locationd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/net/netutil"

	"github.com/meshloc/meshloc/internal/embedetcd"
	"github.com/meshloc/meshloc/internal/etcdauth"
	"github.com/meshloc/meshloc/internal/locationd/recovery"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/mtls"
)

// ErrAlreadyRun is returned by a second call of Server.Run.
var ErrAlreadyRun = errors.New("locationd: server already run")

// dialTimeout bounds the etcd client's first connection attempt.
const dialTimeout = 5 * time.Second

// Server is one locationd. See the package doc for its lifecycle.
type Server struct {
	cfg  Config
	log  zerolog.Logger
	keys keyspace.Keys
	reg  *prometheus.Registry
	m    *metrics
	// etcdm are the meshloc_etcd_* metrics (etcd.go); compaction is how
	// an external etcd's compaction is judged (etcd_compaction.go; tests
	// shorten it).
	etcdm      *etcdMetrics
	compaction compactionCheck
	ctrl       *recovery.Controller // set by Run (startControllers), under mu
	tls        *mtls.Reloader       // nil: plaintext API

	ran   atomic.Bool
	ready chan struct{}

	mu        sync.Mutex
	events    *eventHub    // GET /v1/events, from Run on
	etcdMon   *etcdMonitor // /readyz's alarms, GET /v1/etcd (etcd.go), from Run on
	httpAddr  string
	endpoints []string
}

// New validates cfg and returns a Server that is not running yet. log is the
// server's logger (never the global one).
func New(cfg Config, log zerolog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	keys, err := cfg.Keys()
	if err != nil {
		return nil, err
	}
	cfg.EtcdEndpoints = append([]string(nil), cfg.EtcdEndpoints...)
	var rl *mtls.Reloader
	if cfg.TLSFiles().Enabled() {
		if rl, err = mtls.Load(cfg.TLSFiles()); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		if id := rl.Identity(); id.Role != mtls.RoleLocationd {
			return nil, fmt.Errorf("%w: --cert-file names %s, not a locationd", ErrInvalidConfig, id)
		}
	}
	reg := prometheus.NewRegistry()
	return &Server{
		cfg:   cfg,
		log:   log,
		keys:  keys,
		reg:   reg,
		m:     newMetrics(reg),
		etcdm: newEtcdMetrics(reg),
		ready: make(chan struct{}),

		compaction: defaultCompactionCheck,
		tls:        rl,
	}, nil
}

// Ready is closed once the HTTP API serves (step 3 of Run).
func (s *Server) Ready() <-chan struct{} { return s.ready }

// HTTPAddr is the address the API listens on (the real port when Config.HTTP
// asked for port 0); "" before Ready.
func (s *Server) HTTPAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.httpAddr
}

// EtcdEndpoints are the client URLs of the etcd in use (the embedded one's
// when no endpoints were configured); nil before Ready.
func (s *Server) EtcdEndpoints() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.endpoints...)
}

// etcdMonitor is Run's (nil before).
func (s *Server) etcdMonitor() *etcdMonitor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.etcdMon
}

// Registry is the Prometheus registry the server's /metrics serves.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Run serves until ctx is done; see the package doc for the order of start
// and shutdown.
func (s *Server) Run(ctx context.Context) (err error) {
	if !s.ran.CompareAndSwap(false, true) {
		return ErrAlreadyRun
	}
	cfg := s.cfg

	// 1. The store. Deferred closes run in reverse order: HTTP, client, etcd.
	var etcd *embedetcd.Server
	endpoints := cfg.EtcdEndpoints
	if cfg.Embedded() {
		dir := filepath.Join(cfg.DataDir, "etcd")
		var ic string
		ic, err = cfg.EtcdInitialCluster() // checked by New
		if err != nil {
			return err
		}
		s.log.Info().Str("dir", dir).Str("client", cfg.ListenClient).Str("peer", cfg.ListenPeer).
			Str("name", cfg.MemberName).Str("initialCluster", ic).Str("initialClusterState", cfg.InitialClusterState).
			Msg("starting embedded etcd")
		ecfg := embedetcd.Config{
			Name:           cfg.MemberName,
			Dir:            dir,
			ClientURL:      cfg.ListenClient,
			PeerURL:        cfg.ListenPeer,
			InitialCluster: ic,
			ClusterToken:   cfg.InitialClusterToken,
			ClusterState:   cfg.InitialClusterState,
			StartTimeout:   cfg.EtcdStartTimeout,
			LogLevel:       cfg.EtcdLogLevel,
			QuotaBytes:     cfg.EtcdQuotaBytes,
			Maintenance:    new(cfg.EtcdMaintenance()),
			Log:            s.log.With().Str("component", "etcd").Logger(),
		}
		if f := cfg.TLSFiles(); f.Enabled() {
			ecfg.ClientTLS = &embedetcd.TLSFiles{Cert: f.Cert, Key: f.Key, CA: f.CA, CRL: f.CRL}
		}
		if f := cfg.PeerTLSFiles(); f.Enabled() {
			ecfg.PeerTLS = &embedetcd.TLSFiles{Cert: f.Cert, Key: f.Key, CA: f.CA, CRL: f.CRL}
		}
		etcd, err = embedetcd.Start(ctx, ecfg)
		if err != nil {
			if ctx.Err() != nil {
				return nil // cancelled while starting: a clean stop
			}
			return fmt.Errorf("locationd: embedded etcd: %w", err)
		}
		defer func() {
			etcd.Close()
			s.log.Info().Msg("embedded etcd stopped")
		}()
		endpoints = []string{etcd.Endpoint()}
	}

	// 2. The client. Its own zap logger is silenced: its retries surface as
	// request errors (503) and /readyz failures, logged by us.
	ecc, err := cfg.Etcd(endpoints).ClientConfig()
	if err != nil {
		return fmt.Errorf("locationd: etcd client: %w", err)
	}
	ecc.DialTimeout = dialTimeout
	cli, err := clientv3.New(ecc)
	if err != nil {
		return fmt.Errorf("locationd: etcd client %v: %w", endpoints, err)
	}
	defer cli.Close()
	if etcd != nil && s.tls != nil || cfg.EtcdSetupAuth {
		// The embedded etcd with TLS gets its users and roles at its first
		// start (a restart, or another member, finds authentication on).
		actx, cancel := context.WithTimeout(ctx, cfg.EtcdStartTimeout)
		enabled, err := etcdauth.Setup(actx, cli, s.keys, cfg.EtcdNodeUsers)
		cancel()
		if err != nil {
			return fmt.Errorf("locationd: etcd authentication: %w", err)
		}
		if enabled {
			users := []string{etcdauth.UserRoot, etcdauth.UserLocationd, etcdauth.UserWatch}
			for _, n := range cfg.EtcdNodeUsers {
				users = append(users, etcdauth.NodeUser(n))
			}
			s.log.Info().Strs("users", users).Msg("etcd authentication enabled")
		}
	}
	policyErr, stopPolicy := s.enforcePolicy(ctx, cli, "locationd "+cfg.MemberName)
	defer stopPolicy()
	// The connections to the nodes' AdminService (relocation routes). Closed
	// after the API (deferred, so before the client): it cancels the node
	// calls still in flight after the shutdown bound and waits for them.
	pool := newAdminPool(poolIdle)
	defer pool.close()
	if s.tls != nil {
		pool.creds = s.tls.ClientCredentials(mtls.WantRole(mtls.RoleNode))
	}

	// etcd's alarms, sizes and compaction, followed until the client closes.
	mon, stopMonitor := s.startEtcdMonitor(cli, etcd)
	defer stopMonitor()
	s.mu.Lock()
	s.etcdMon = mon
	s.mu.Unlock()

	// The event stream's hub: its sources run while it has clients; closed
	// (every stream ended) before the API shuts down.
	events := newEventHub(cfg.Events, s.log, s.eventSources(cli, pool))
	defer events.close()
	s.mu.Lock()
	s.events = events
	s.mu.Unlock()

	// 3. The API.
	ln, err := net.Listen("tcp", cfg.HTTP)
	if err != nil {
		return fmt.Errorf("locationd: listen --http %s: %w", cfg.HTTP, err)
	}
	// At most HTTPMaxConnections connections are open at once: the next one
	// is accepted (and gets a goroutine) only when one closes, so a flood
	// of connections waits in the kernel's backlog instead of growing the
	// process. The timeouts bound what each connection may hold (Config).
	addr := ln.Addr().String()
	ln = netutil.LimitListener(ln, cfg.HTTPMaxConnections)
	if s.tls != nil {
		ln = tls.NewListener(ln, s.tls.ServerConfig())
	}
	hs := &http.Server{
		Handler:           s.routes(authority.New(cli, s.keys), cli, pool, events),
		ReadHeaderTimeout: cfg.HTTPReadHeaderTimeout,
		ReadTimeout:       cfg.HTTPReadTimeout,
		WriteTimeout:      cfg.HTTPWriteTimeout,
		IdleTimeout:       cfg.HTTPIdleTimeout,
		MaxHeaderBytes:    cfg.HTTPMaxHeaderBytes,
		ErrorLog:          stdlog.New(s.log.With().Str("component", "http").Logger(), "", 0),
	}
	s.mu.Lock()
	s.httpAddr = addr
	s.endpoints = append([]string(nil), endpoints...)
	s.mu.Unlock()
	// The recovery controller campaigns from here on; stopped (deferred)
	// after the API, before the node pool and the client.
	stopControllers, err := s.startControllers(cli)
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer stopControllers()

	// The HTTP server's goroutine (the controller's is startControllers'): it
	// ends when hs is shut down, and Run waits for it below.
	serveDone := make(chan error, 1)
	go func() { serveDone <- hs.Serve(ln) }()
	close(s.ready)
	s.log.Info().Str("http", s.HTTPAddr()).Strs("etcd", endpoints).Bool("embedded", etcd != nil).
		Str("keys", s.keys.Base()).Msg("locationd serving")

	// 4. Wait.
	var etcdErr <-chan error
	if etcd != nil {
		etcdErr = etcd.Err()
	}
	var cause error
	select {
	case <-ctx.Done():
		s.log.Info().Msg("shutting down")
	case e := <-serveDone:
		serveDone = nil
		cause = fmt.Errorf("locationd: http server: %w", e)
	case e := <-etcdErr:
		if e == nil {
			e = errors.New("stopped")
		}
		cause = fmt.Errorf("locationd: embedded etcd: %w", e)
	case e := <-policyErr:
		cause = fmt.Errorf("locationd: %w", e)
	}
	if cause != nil {
		s.log.Error().Err(cause).Msg("shutting down")
	}

	// 5. Shut down: the API first, so no handler uses the client after it is
	// closed; then (deferred) the client and the embedded etcd.
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	events.close() // the event streams end now: they would hold Shutdown
	if e := hs.Shutdown(sctx); e != nil {
		s.log.Warn().Err(e).Dur("bound", cfg.ShutdownTimeout).Msg("requests still in flight at the shutdown bound; closing their connections")
		_ = hs.Close()
	}
	if serveDone != nil {
		<-serveDone // http.ErrServerClosed
	}
	return cause
}

// ReloadTLS reads the API's certificate and key again (SIGHUP): new
// connections use them. The embedded etcd reads its files at every new
// connection by itself.
func (s *Server) ReloadTLS() error {
	if s.tls == nil {
		return nil
	}
	return s.tls.Reload()
}
