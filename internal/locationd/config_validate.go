package locationd

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/internal/embedetcd"
	"github.com/meshloc/meshloc/internal/logging"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/mtls"
)

// Checking a configuration before anything starts: every field, TLS, the
// embedded member cluster.

func (c *Config) validateTLS() error {
	if err := c.TLSFiles().Validate(); err != nil {
		return &FlagError{Flag: "--cert-file/--key-file/--trusted-ca-file", Value: c.CertFile, Reason: err.Error()}
	}
	if err := c.PeerTLSFiles().Validate(); err != nil {
		return &FlagError{Flag: "--peer-cert-file/--peer-key-file/--peer-trusted-ca-file", Value: c.PeerCertFile, Reason: err.Error()}
	}
	tls := c.TLSFiles().Enabled()
	addrs := map[string]string{"--http": c.HTTP}
	if c.Embedded() {
		for flag, raw := range map[string]string{"--listen-client": c.ListenClient, "--listen-peer": c.ListenPeer} {
			u, err := url.Parse(raw)
			if err != nil {
				continue // checkURL says why
			}
			addrs[flag] = u.Host
			secured := tls
			if flag == "--listen-peer" {
				secured = c.PeerTLSFiles().Enabled()
			}
			if secured != (u.Scheme == "https") {
				return &FlagError{Flag: flag, Value: raw, Reason: "is https:// exactly when its TLS files are given"}
			}
		}
		if tls && (c.EtcdCert == "" && c.EtcdUser == "") {
			return &FlagError{Flag: "--etcd-cert", Value: "", Reason: "the embedded etcd authenticates its clients: give this locationd's etcd client certificate (etcd-locationd.crt) with --etcd-key"}
		}
		if c.EtcdSetupAuth {
			return &FlagError{Flag: "--etcd-setup-auth", Value: "true", Reason: "is for --etcd-endpoints: the embedded etcd with TLS sets up its authentication itself"}
		}
	} else if c.PeerTLSFiles().Enabled() {
		return &FlagError{Flag: "--peer-cert-file", Value: c.PeerCertFile, Reason: "means nothing with --etcd-endpoints (no embedded etcd is started)"}
	}
	for _, n := range c.EtcdNodeUsers {
		if err := keyspace.ValidateOwnerID(n); err != nil {
			return &FlagError{Flag: "--etcd-node-users", Value: n, Reason: "is not a node name (owner id): " + err.Error()}
		}
	}
	for flag, a := range addrs {
		if tls && flag != "--listen-peer" || flag == "--listen-peer" && c.PeerTLSFiles().Enabled() || c.Insecure || mtls.Loopback(a) {
			continue
		}
		return &FlagError{Flag: flag, Value: a, Reason: "is not a loopback address: give the TLS flags (--cert-file, --key-file, --trusted-ca-file; --peer-* for --listen-peer), or --insecure to serve plaintext there"}
	}
	if err := c.Etcd(c.EtcdEndpoints).Validate(); err != nil && !c.Embedded() {
		return &FlagError{Flag: "--etcd-*", Value: strings.Join(c.EtcdEndpoints, ","), Reason: err.Error()}
	}
	return nil
}

// Embedded reports whether c runs an embedded etcd (no endpoints given).
func (c *Config) Embedded() bool { return len(c.EtcdEndpoints) == 0 }

// Keys is the key codec of c's prefix and cluster.
func (c *Config) Keys() (keyspace.Keys, error) { return keyspace.New(c.Prefix, c.Cluster) }

// Level is the parsed LogLevel.
func (c *Config) Level() (zerolog.Level, error) { return logging.ParseLevel(c.LogLevel) }

func checkURL(field, s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: %s %q is not a URL like http://127.0.0.1:2379", ErrInvalidConfig, field, s)
	}
	return u, nil
}

// Validate checks every field and the relations between them. It changes
// nothing.
func (c *Config) Validate() error {
	if _, err := c.Keys(); err != nil {
		return fmt.Errorf("%w: --prefix/--cluster: %w", ErrInvalidConfig, err)
	}
	if _, err := c.Level(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := logging.CheckFormat(c.LogFormat); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if _, _, err := net.SplitHostPort(c.HTTP); err != nil {
		return fmt.Errorf("%w: --http %q is not host:port: %w", ErrInvalidConfig, c.HTTP, err)
	}
	if c.RequestTimeout <= 0 || c.ShutdownTimeout <= 0 || c.EtcdStartTimeout <= 0 {
		return fmt.Errorf("%w: --request-timeout, --shutdown-timeout and --etcd-start-timeout must be positive", ErrInvalidConfig)
	}
	if c.RelocationTimeout <= 0 || c.RelocationTimeout > maxRelocationTimeout {
		return fmt.Errorf("%w: --relocation-timeout %s must be positive and at most %s", ErrInvalidConfig, c.RelocationTimeout, maxRelocationTimeout)
	}
	if err := c.validateHTTPServer(); err != nil {
		return err
	}
	if err := c.validateTLS(); err != nil {
		return err
	}
	if err := c.recoveryConfig("check", "").Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if !c.Embedded() {
		for _, e := range c.EtcdEndpoints {
			if _, err := checkURL("--etcd-endpoints element", e); err != nil {
				return err
			}
		}
		return c.refuseClusterFlags()
	}
	switch c.EtcdLogLevel {
	case "debug", "info", "warn", "error", "panic", "fatal":
	default:
		return fmt.Errorf("%w: --etcd-log-level %q (want debug, info, warn, error, panic or fatal)", ErrInvalidConfig, c.EtcdLogLevel)
	}
	if c.DataDir == "" {
		return fmt.Errorf("%w: --data-dir is required for the embedded etcd", ErrInvalidConfig)
	}
	if err := c.validateEtcdSize(); err != nil {
		return err
	}
	cu, err := checkURL("--listen-client", c.ListenClient)
	if err != nil {
		return err
	}
	pu, err := checkURL("--listen-peer", c.ListenPeer)
	if err != nil {
		return err
	}
	if cu.Host == pu.Host {
		return fmt.Errorf("%w: --listen-client and --listen-peer both use %s", ErrInvalidConfig, cu.Host)
	}
	if c.HTTP == cu.Host || c.HTTP == pu.Host {
		return fmt.Errorf("%w: --http %s is also an etcd URL's address", ErrInvalidConfig, c.HTTP)
	}
	_, err = c.EtcdInitialCluster()
	return err
}

// Bounds of the HTTP server's fields.
const (
	minHTTPMaxHeaderBytes = 1 << 10
	maxHTTPMaxHeaderBytes = 1 << 20
	maxHTTPMaxConnections = 1 << 20
)

// validateHTTPServer checks the HTTP server's bounds. Every error is a
// *FlagError.
func (c *Config) validateHTTPServer() error {
	switch {
	case c.HTTPReadTimeout <= 0:
		return &FlagError{Flag: "--http-read-timeout", Value: c.HTTPReadTimeout.String(), Reason: "must be positive"}
	case c.HTTPReadHeaderTimeout <= 0 || c.HTTPReadHeaderTimeout > c.HTTPReadTimeout:
		return &FlagError{Flag: "--http-read-header-timeout", Value: c.HTTPReadHeaderTimeout.String(),
			Reason: fmt.Sprintf("must be positive and at most --http-read-timeout (%s)", c.HTTPReadTimeout)}
	case c.HTTPWriteTimeout <= c.RequestTimeout:
		return &FlagError{Flag: "--http-write-timeout", Value: c.HTTPWriteTimeout.String(),
			Reason: fmt.Sprintf("must exceed --request-timeout (%s), which bounds the work before an answer", c.RequestTimeout)}
	case c.HTTPIdleTimeout <= 0:
		return &FlagError{Flag: "--http-idle-timeout", Value: c.HTTPIdleTimeout.String(), Reason: "must be positive"}
	case c.HTTPMaxHeaderBytes < minHTTPMaxHeaderBytes || c.HTTPMaxHeaderBytes > maxHTTPMaxHeaderBytes:
		return &FlagError{Flag: "--http-max-header-bytes", Value: strconv.Itoa(c.HTTPMaxHeaderBytes),
			Reason: fmt.Sprintf("want %d..%d bytes", minHTTPMaxHeaderBytes, maxHTTPMaxHeaderBytes)}
	case c.HTTPMaxConnections < 1 || c.HTTPMaxConnections > maxHTTPMaxConnections:
		return &FlagError{Flag: "--http-max-connections", Value: strconv.Itoa(c.HTTPMaxConnections),
			Reason: fmt.Sprintf("want 1..%d", maxHTTPMaxConnections)}
	}
	return c.Events.validate()
}

// Bounds of the embedded etcd's size fields.
const (
	minEtcdQuotaBytes   = 1 << 20
	maxEtcdRetention    = 24 * time.Hour
	minEtcdRetention    = time.Second
	maxEtcdQuotaBytesGB = embedetcd.MaxQuotaBytes >> 30
)

// validateEtcdSize checks the embedded etcd's quota and maintenance.
func (c *Config) validateEtcdSize() error {
	if c.EtcdQuotaBytes < minEtcdQuotaBytes || c.EtcdQuotaBytes > embedetcd.MaxQuotaBytes {
		return &FlagError{Flag: "--etcd-quota-bytes", Value: strconv.FormatInt(c.EtcdQuotaBytes, 10),
			Reason: fmt.Sprintf("want %d (1 MiB)..%d (%d GiB) bytes", minEtcdQuotaBytes, int64(embedetcd.MaxQuotaBytes), maxEtcdQuotaBytesGB)}
	}
	if r := c.EtcdCompactionRetention; r != 0 && (r < minEtcdRetention || r > maxEtcdRetention) {
		return &FlagError{Flag: "--etcd-compaction-retention", Value: r.String(), Reason: "want 0 (never compact) or 1s..24h"}
	}
	return nil
}

// EtcdMaintenance is the embedded etcd's maintenance of c.
func (c *Config) EtcdMaintenance() embedetcd.Maintenance {
	return embedetcd.Maintenance{Retention: c.EtcdCompactionRetention, Defrag: c.EtcdDefrag}
}

// refuseClusterFlags refuses, with --etcd-endpoints, a cluster flag that is
// not at its default: there is no embedded etcd for it to configure.
func (c *Config) refuseClusterFlags() error {
	for _, f := range []struct {
		flag, value string
		unset       []string
	}{
		{"--name", c.MemberName, []string{"", DefaultMemberName}},
		{"--initial-cluster", c.InitialCluster, []string{""}},
		{"--initial-cluster-state", c.InitialClusterState, []string{"", ClusterStateNew}},
		{"--initial-cluster-token", c.InitialClusterToken, []string{"", DefaultClusterToken}},
		{"--etcd-quota-bytes", strconv.FormatInt(c.EtcdQuotaBytes, 10), []string{"0", strconv.FormatInt(embedetcd.DefaultQuotaBytes, 10)}},
		{"--etcd-compaction-retention", c.EtcdCompactionRetention.String(), []string{"0s", embedetcd.DefaultRetention.String()}},
		{"--etcd-defrag", strconv.FormatBool(c.EtcdDefrag), []string{"false", strconv.FormatBool(embedetcd.DefaultMaintenance().Defrag)}},
	} {
		if !slices.Contains(f.unset, f.value) {
			return &FlagError{Flag: f.flag, Value: f.value, Reason: "means nothing with --etcd-endpoints (no embedded etcd is started)"}
		}
	}
	return nil
}

// EtcdInitialCluster checks the embedded etcd's cluster fields and returns
// the initial cluster to start it with: InitialCluster without blanks, or
// MemberName=ListenPeer for a single member. Every error is a *FlagError.
func (c *Config) EtcdInitialCluster() (string, error) {
	if c.MemberName == "" || strings.ContainsAny(c.MemberName, ",= \t") {
		return "", &FlagError{Flag: "--name", Value: c.MemberName, Reason: "want a non-empty member name without commas, '=' or blanks"}
	}
	switch c.InitialClusterState {
	case ClusterStateNew, ClusterStateExisting:
	default:
		return "", &FlagError{Flag: "--initial-cluster-state", Value: c.InitialClusterState, Reason: "want new or existing"}
	}
	if c.InitialClusterToken == "" {
		return "", &FlagError{Flag: "--initial-cluster-token", Value: "", Reason: "must not be empty"}
	}
	pu, err := checkURL("--listen-peer", c.ListenPeer)
	if err != nil {
		return "", err
	}
	if c.InitialCluster == "" {
		if c.InitialClusterState == ClusterStateExisting {
			return "", &FlagError{Flag: "--initial-cluster-state", Value: c.InitialClusterState,
				Reason: "joining an existing cluster needs --initial-cluster (its members, and this one)"}
		}
		return c.MemberName + "=" + pu.String(), nil
	}
	bad := func(reason string) (string, error) {
		return "", &FlagError{Flag: "--initial-cluster", Value: c.InitialCluster, Reason: reason}
	}
	var (
		parts   []string
		mine    []string              // URLs of MemberName
		members []string              // names, in order, once each
		owner   = map[string]string{} // peer URL → member name
	)
	for e := range strings.SplitSeq(c.InitialCluster, ",") {
		e = strings.TrimSpace(e)
		name, raw, ok := strings.Cut(e, "=")
		name, raw = strings.TrimSpace(name), strings.TrimSpace(raw)
		if !ok || name == "" || raw == "" {
			return bad(fmt.Sprintf("element %q is not name=peerURL", e))
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return bad(fmt.Sprintf("member %s: %q is not a peer URL like http://127.0.0.1:2380", name, raw))
		}
		us := u.Scheme + "://" + u.Host
		if other, dup := owner[us]; dup {
			return bad(fmt.Sprintf("peer URL %s is given to both %s and %s", us, other, name))
		}
		owner[us] = name
		if !slices.Contains(members, name) {
			members = append(members, name)
		}
		if name == c.MemberName {
			mine = append(mine, us)
		}
		parts = append(parts, name+"="+us)
	}
	if len(mine) == 0 {
		return "", &FlagError{Flag: "--name", Value: c.MemberName,
			Reason: fmt.Sprintf("is not a member of --initial-cluster (members: %s)", strings.Join(members, ", "))}
	}
	if me := pu.Scheme + "://" + pu.Host; len(mine) != 1 || mine[0] != me {
		return bad(fmt.Sprintf("gives member %s the peer URL(s) %s, but --listen-peer is %s", c.MemberName, strings.Join(mine, ", "), me))
	}
	return strings.Join(parts, ","), nil
}
