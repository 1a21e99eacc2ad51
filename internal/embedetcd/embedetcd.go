// Package embedetcd runs an etcd server inside the current process, the
// default store of locationd (one machine) and of the tests (real etcd, never a
// mock). It is a thin, validated wrapper over go.etcd.io/etcd/server/v3/embed,
// and a member it starts looks after its own size: it compacts its history,
// defragments its file and runs under a quota (maintain.go).
//
// It is not a cluster manager: a 3-member cluster is three Servers started with
// the same InitialCluster string (see ClusterString, and etcdtest.Cluster).
package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/etcd/client/pkg/v3/logutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// ErrStartTimeout is returned when the embedded server did not become ready in
// Config.StartTimeout.
var ErrStartTimeout = errors.New("embedetcd: server did not become ready in time")

// Config of one embedded member.
type Config struct {
	// Name of the member (default "default").
	Name string
	// Dir is the data directory (required).
	Dir string
	// ClientURL the member listens on for clients, e.g. http://127.0.0.1:2379.
	ClientURL string
	// PeerURL the member listens on for peers, e.g. http://127.0.0.1:2380.
	PeerURL string
	// InitialCluster is "name=peerURL,..."; empty means a single member.
	InitialCluster string
	// ClusterToken separates clusters that share peer ports by accident.
	ClusterToken string
	// ClusterState is "new" (the default: the members in InitialCluster
	// bootstrap a cluster together) or "existing" (join a running cluster
	// that this member was added to). Like InitialCluster, it is ignored by a
	// member whose Dir already holds a WAL: that member restarts as the
	// member its WAL says it is.
	ClusterState string
	// LogLevel of etcd's own zap logger ("error" by default: etcd is chatty).
	LogLevel string
	// StartTimeout bounds how long Start waits for readiness (default 30 s).
	StartTimeout time.Duration
	// MaxTxnOps and MaxRequestBytes raise etcd's transaction caps when > 0
	// (etcd defaults: 128 operations, 1.5 MiB).
	MaxTxnOps       uint
	MaxRequestBytes uint
	// ClientTLS, when set, serves clients over TLS (ClientURL is then
	// https://) and requires a client certificate from its CA: etcd takes
	// the certificate's common name as the user when authentication is on.
	ClientTLS *TLSFiles
	// PeerTLS, when set, secures the peer port the same way (PeerURL is then
	// https://).
	PeerTLS *TLSFiles
	// QuotaBytes is the size the member's file may reach (etcd's
	// --quota-backend-bytes): a write that would pass it fails, and the
	// NOSPACE alarm stops every write until it is disarmed. 0:
	// DefaultQuotaBytes.
	QuotaBytes int64
	// Maintenance is the member's own compaction and defragmentation
	// (maintain.go); nil: DefaultMaintenance().
	Maintenance *Maintenance
	// Log receives the maintenance's lines (compactions under pressure,
	// defragmentations, failures); the zero value writes nothing.
	Log zerolog.Logger

	// tick replaces the maintenance loop's second (this package's tests).
	tick time.Duration
}

// TLSFiles are a member's certificate, key and the CA its peers' (or
// clients') certificates must chain to.
type TLSFiles struct {
	Cert, Key, CA string
	// CRL, if set, is the CA's revocation list: etcd refuses a peer whose
	// certificate it lists, reading the file at each new connection.
	CRL string
}

func (f *TLSFiles) info() transport.TLSInfo {
	return transport.TLSInfo{CertFile: f.Cert, KeyFile: f.Key, TrustedCAFile: f.CA, ClientCertAuth: true, CRLFile: f.CRL}
}

// Server is a running embedded member.
type Server struct {
	e         *embed.Etcd
	cfg       Config
	quota     int64
	maint     *maintainer
	closing   *atomic.Bool
	closeOnce sync.Once
}

// quietOnClose drops etcd's log entries once Close has begun: closing the
// listeners makes etcd log "serving failed: use of closed network connection"
// at error level with a stack trace, which is noise on every clean stop.
type quietOnClose struct {
	zapcore.Core
	closing *atomic.Bool
}

func (c quietOnClose) With(f []zapcore.Field) zapcore.Core {
	return quietOnClose{Core: c.Core.With(f), closing: c.closing}
}

func (c quietOnClose) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.closing.Load() {
		return ce
	}
	return c.Core.Check(e, ce)
}

func parseURL(field, s string) (url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return url.URL{}, fmt.Errorf("embedetcd: %s %q is not a URL like http://127.0.0.1:2379", field, s)
	}
	return *u, nil
}

// Start starts the member and waits until it is ready to serve.
func Start(ctx context.Context, c Config) (*Server, error) {
	if c.Dir == "" {
		return nil, errors.New("embedetcd: Dir is required")
	}
	if c.Name == "" {
		c.Name = "default"
	}
	if c.LogLevel == "" {
		c.LogLevel = "error"
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 30 * time.Second
	}
	if c.QuotaBytes < 0 {
		return nil, fmt.Errorf("embedetcd: QuotaBytes %d is negative", c.QuotaBytes)
	}
	if c.QuotaBytes == 0 {
		c.QuotaBytes = DefaultQuotaBytes
	}
	maint := DefaultMaintenance()
	if c.Maintenance != nil {
		maint = *c.Maintenance
	}
	if maint.Retention < 0 {
		return nil, fmt.Errorf("embedetcd: Maintenance.Retention %s is negative", maint.Retention)
	}
	cu, err := parseURL("ClientURL", c.ClientURL)
	if err != nil {
		return nil, err
	}
	pu, err := parseURL("PeerURL", c.PeerURL)
	if err != nil {
		return nil, err
	}
	ec := embed.NewConfig()
	ec.Name = c.Name
	ec.Dir = c.Dir
	ec.ListenClientUrls = []url.URL{cu}
	ec.AdvertiseClientUrls = []url.URL{cu}
	ec.ListenPeerUrls = []url.URL{pu}
	ec.AdvertisePeerUrls = []url.URL{pu}
	if c.InitialCluster == "" {
		ec.InitialCluster = c.Name + "=" + pu.String()
	} else {
		ec.InitialCluster = c.InitialCluster
	}
	if c.ClusterToken != "" {
		ec.InitialClusterToken = c.ClusterToken
	}
	switch c.ClusterState {
	case "", embed.ClusterStateFlagNew:
		ec.ClusterState = embed.ClusterStateFlagNew
	case embed.ClusterStateFlagExisting:
		ec.ClusterState = embed.ClusterStateFlagExisting
	default:
		return nil, fmt.Errorf("embedetcd: ClusterState %q (want %q or %q)", c.ClusterState, embed.ClusterStateFlagNew, embed.ClusterStateFlagExisting)
	}
	ec.LogLevel = c.LogLevel
	closing := new(atomic.Bool)
	zc := logutil.DefaultZapLoggerConfig
	zc.Level = zap.NewAtomicLevelAt(logutil.ConvertToZapLevel(c.LogLevel))
	lg, err := zc.Build(zap.WrapCore(func(core zapcore.Core) zapcore.Core { return quietOnClose{Core: core, closing: closing} }))
	if err != nil {
		return nil, fmt.Errorf("embedetcd: logger: %w", err)
	}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	ec.QuotaBackendBytes = c.QuotaBytes
	if c.MaxTxnOps > 0 {
		ec.MaxTxnOps = c.MaxTxnOps
	}
	if c.MaxRequestBytes > 0 {
		ec.MaxRequestBytes = c.MaxRequestBytes
	}
	if c.ClientTLS != nil {
		if cu.Scheme != "https" {
			return nil, fmt.Errorf("embedetcd: ClientURL %s must be https:// with client TLS", c.ClientURL)
		}
		ec.ClientTLSInfo = c.ClientTLS.info()
		ec.ClientAutoTLS = false
	}
	if c.PeerTLS != nil {
		if pu.Scheme != "https" {
			return nil, fmt.Errorf("embedetcd: PeerURL %s must be https:// with peer TLS", c.PeerURL)
		}
		ec.PeerTLSInfo = c.PeerTLS.info()
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("embedetcd: start %s: %w", c.Name, err)
	}
	t := time.NewTimer(c.StartTimeout)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedetcd: %s: %w", c.Name, err)
	case <-t.C:
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("%w (%s after %s)", ErrStartTimeout, c.Name, c.StartTimeout)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	s := &Server{e: e, cfg: c, quota: c.QuotaBytes, closing: closing}
	s.maint = startMaintainer(s, maint, c.Log, c.tick)
	return s, nil
}

// Stats are the member's size and what its maintenance did.
func (s *Server) Stats() Stats { return s.maint.snapshot() }

// Endpoint is the client URL of the member.
func (s *Server) Endpoint() string { return s.cfg.ClientURL }

// Err reports a fatal server error after start.
func (s *Server) Err() <-chan error { return s.e.Err() }

// Etcd exposes the underlying member (tests: move-leader, member id).
func (s *Server) Etcd() *embed.Etcd { return s.e }

// Close stops the member and waits for its goroutines to end. It may be
// called more than once (a test that stops a member, and its cleanup): the
// calls after the first wait for it and do nothing more (embed.Etcd.Close
// panics when called twice).
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.maint.close()
		s.closing.Store(true)
		s.e.Close()
	})
}

// ClusterString builds an InitialCluster value from names and peer URLs.
func ClusterString(names, peerURLs []string) string {
	parts := make([]string, len(names))
	for i := range names {
		parts[i] = names[i] + "=" + peerURLs[i]
	}
	return strings.Join(parts, ",")
}
