package fanout

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/mtls"
)

// ErrInvalidConfig: a Config field, or a relation between fields, cannot work.
var ErrInvalidConfig = errors.New("fanout: invalid config")

// Config of a fan-out process (`locationd watch-proxy`).
type Config struct {
	// Listen (--listen, default 127.0.0.1:23790) is where clients reach
	// the fan-out: the URL nodes give as --etcd-watch-endpoints.
	Listen string
	// HTTP (--http, default 127.0.0.1:23791; empty: off) serves /metrics
	// and /healthz (200 while etcd answers a linearizable read).
	HTTP string
	// Etcd is how the fan-out reaches etcd. Its identity needs read access
	// to the cluster's authority/ and owners/ keys only (the etcd user
	// meshloc-watch, internal/etcdauth).
	Etcd mtls.Etcd
	// Keys: the cluster whose authority/ and owners/ prefixes are served.
	Keys keyspace.Keys
	// History (--history-events, default 10,000) and Queue
	// (--client-queue, default 1,024): Options.
	History, Queue int
	// TLS (the cluster's CA and a certificate of it valid for Listen's
	// host): set, clients must present a certificate of the CA (the
	// nodes' etcd client certificates); unset, Listen must be loopback
	// unless Insecure.
	TLS      mtls.Files
	Insecure bool
}

// DefaultListen and DefaultHTTP are the defaults of Listen and HTTP (the
// port of etcd's own gRPC proxy, and the next).
const (
	DefaultListen = "127.0.0.1:23790"
	DefaultHTTP   = "127.0.0.1:23791"
)

// Validate checks fields and their relations.
func (c *Config) Validate() error {
	bad := func(flag, value, reason string) error {
		return fmt.Errorf("%w: %s %q: %s", ErrInvalidConfig, flag, value, reason)
	}
	for flag, addr := range map[string]string{"--listen": c.Listen, "--http": c.HTTP} {
		if addr == "" && flag == "--http" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return bad(flag, addr, "is not host:port")
		}
		if !c.TLS.Enabled() && !c.Insecure && !mtls.Loopback(addr) {
			return bad(flag, addr, "not loopback: give the TLS files, or --insecure")
		}
	}
	if c.History < 1 || c.History > 10_000_000 {
		return bad("--history-events", fmt.Sprint(c.History), "want 1..10000000")
	}
	if c.Queue < 1 || c.Queue > 1_000_000 {
		return bad("--client-queue", fmt.Sprint(c.Queue), "want 1..1000000")
	}
	if err := c.TLS.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := c.Etcd.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// Run serves the fan-out until ctx ends. ready, when not nil, is called
// with the gRPC address once it serves.
func Run(ctx context.Context, cfg Config, log zerolog.Logger, ready func(addr string)) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	ecfg, err := cfg.Etcd.ClientConfig()
	if err != nil {
		return fmt.Errorf("fanout: etcd: %w", err)
	}
	etcd, err := clientv3.New(ecfg)
	if err != nil {
		return fmt.Errorf("fanout: etcd: %w", err)
	}
	defer etcd.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s, err := New(etcd, Options{
		Ranges:  []Range{Prefix(cfg.Keys.AuthorityPrefix()), Prefix(cfg.Keys.OwnersPrefix())},
		History: cfg.History, Queue: cfg.Queue, Registry: reg,
	}, log)
	if err != nil {
		return err
	}
	defer s.Close()
	var opts []grpc.ServerOption
	if cfg.TLS.Enabled() {
		r, err := mtls.Load(cfg.TLS)
		if err != nil {
			return fmt.Errorf("fanout: %w", err)
		}
		opts = append(opts, grpc.Creds(r.ServerCredentials()))
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("fanout: listen %s: %w", cfg.Listen, err)
	}
	g := grpc.NewServer(opts...)
	s.Register(g)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer g.Stop() // before s.Close: the streams end first
	wg.Go(func() { _ = g.Serve(lis) })
	if cfg.HTTP != "" {
		hl, err := net.Listen("tcp", cfg.HTTP)
		if err != nil {
			return fmt.Errorf("fanout: listen %s: %w", cfg.HTTP, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
			rctx, cancel := context.WithTimeout(r.Context(), time.Second)
			defer cancel()
			if _, err := etcd.Get(rctx, cfg.Keys.AuthorityPrefix(), clientv3.WithCountOnly()); err != nil {
				http.Error(w, "etcd: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		wg.Go(func() { _ = hs.Serve(hl) })
		defer hs.Close()
	}
	log.Info().Str("listen", lis.Addr().String()).Str("http", cfg.HTTP).Strs("etcd", cfg.Etcd.Endpoints).
		Str("prefix", cfg.Keys.Base()).Msg("watch fan-out serving")
	if ready != nil {
		ready(lis.Addr().String())
	}
	<-ctx.Done()
	return nil
}
