package locationd

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/meshloc/meshloc/internal/cliutil"
	"github.com/meshloc/meshloc/internal/embedetcd"
	"github.com/meshloc/meshloc/internal/locationd/recovery"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/mtls"
)

// EnvPrefix is the prefix of the environment mirror of every flag:
// --data-dir is LOCATIOND_DATA_DIR (see cliutil.ApplyEnv). A flag given on the
// command line wins over its variable.
const EnvPrefix = "LOCATIOND_"

// ErrInvalidConfig is returned by Validate for a field, or a relation between
// fields, that cannot work.
var ErrInvalidConfig = errors.New("locationd: invalid config")

// FlagError is the error of Validate for a flag value that cannot work, with
// the flag, its value and why. It is an ErrInvalidConfig (errors.Is).
type FlagError struct {
	Flag   string // e.g. "--initial-cluster"
	Value  string
	Reason string
}

func (e *FlagError) Error() string {
	return fmt.Sprintf("%v: %s %q: %s", ErrInvalidConfig, e.Flag, e.Value, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidConfig) true.
func (e *FlagError) Is(target error) bool { return target == ErrInvalidConfig }

// Defaults of the embedded etcd's cluster flags.
const (
	// DefaultMemberName is --name's default (etcd's own).
	DefaultMemberName = "default"
	// DefaultClusterToken is --initial-cluster-token's default.
	DefaultClusterToken = "meshloc"
	// ClusterStateNew and ClusterStateExisting are the values of
	// --initial-cluster-state.
	ClusterStateNew      = "new"
	ClusterStateExisting = "existing"
)

// Config of one locationd process (docs/design.md §8, flags of §10).
type Config struct {
	// DataDir (--data-dir, default ./data/locationd) holds the embedded etcd's
	// data in DataDir/etcd, so that the directory can later hold other files of
	// locationd. Unused with EtcdEndpoints. Keep it on a local disk: etcd fsyncs
	// every write.
	DataDir string
	// ListenClient (--listen-client, default http://127.0.0.1:2379) is the
	// client URL of the embedded etcd: where meshnodes, etcdctl and
	// this process reach the store. The default is etcd's own, so
	// `etcdctl get --prefix /meshloc/` works without --endpoints. Unused with
	// EtcdEndpoints.
	ListenClient string
	// ListenPeer (--listen-peer, default http://127.0.0.1:2380) is the peer URL
	// of the embedded etcd (raft between members; one member here). Unused with
	// EtcdEndpoints.
	ListenPeer string
	// EtcdEndpoints (--etcd-endpoints, comma list, default empty) are the
	// client URLs of an existing etcd cluster. Set: no embedded etcd is started
	// and DataDir, ListenClient and ListenPeer are ignored. Empty: the embedded
	// etcd, the default that serves one machine. The cluster fields below are
	// refused with it (they would mean nothing).
	EtcdEndpoints []string

	// The embedded etcd's cluster (etcd's flags of the same names). A
	// 3-member cluster is three locationd processes, each with its own
	// MemberName, DataDir and URLs, and the same InitialCluster and
	// InitialClusterToken; each serves the API through its own member. A
	// member restarted with its DataDir rejoins as the member its WAL says it
	// is: etcd then ignores InitialCluster, InitialClusterState and
	// InitialClusterToken.

	// MemberName (--name, default "default") is the member's name, unique in
	// its cluster.
	MemberName string
	// InitialCluster (--initial-cluster, default empty) is the cluster that
	// bootstraps, "name=peerURL,name=peerURL,…". It must name MemberName with
	// ListenPeer as its URL. Empty: a single member, MemberName=ListenPeer.
	InitialCluster string
	// InitialClusterState (--initial-cluster-state, default "new") is "new"
	// (the members of InitialCluster bootstrap together) or "existing" (this
	// member was added to a running cluster with `etcdctl member add`).
	InitialClusterState string
	// InitialClusterToken (--initial-cluster-token, default "meshloc") keeps
	// clusters that share peer URLs by accident apart.
	InitialClusterToken string

	// HTTP (--http, default 127.0.0.1:7070) is the host:port of the location
	// API, /metrics, /healthz and /readyz. Loopback by default: the API has no
	// authentication yet. Port 0 picks a free port (tests); Server.HTTPAddr
	// tells which.
	HTTP string
	// The HTTP server's own bounds, so that a slow or hostile client holds
	// neither a goroutine nor a connection for long (every request of the API
	// is small: a body is at most 64 KiB).
	//
	// HTTPReadHeaderTimeout (--http-read-header-timeout, default 5s) bounds
	// reading a request's line and headers; at most HTTPReadTimeout.
	HTTPReadHeaderTimeout time.Duration
	// HTTPReadTimeout (--http-read-timeout, default 10s) bounds reading a
	// whole request, body included, from its first byte: a client that
	// stalls in its body gets its connection closed then.
	HTTPReadTimeout time.Duration
	// HTTPWriteTimeout (--http-write-timeout, default 30s) bounds the time
	// from a request being read to its answer being written. It must exceed
	// RequestTimeout, which bounds the work of every route that answers at
	// once. The routes that wait for a long operation lift it for their
	// request, to their own bound plus HTTPWriteTimeout: POST
	// /v1/relocations and /v1/groups/join (the relocation's timeout plus
	// RelocationSlack), POST /v1/rebalance (every wave of moves), and the
	// drain's stream, where each line must be written within HTTPWriteTimeout
	// and the stream lasts as long as the drain.
	HTTPWriteTimeout time.Duration
	// HTTPIdleTimeout (--http-idle-timeout, default 2m) closes a keep-alive
	// connection that sends no new request for this long.
	HTTPIdleTimeout time.Duration
	// HTTPMaxHeaderBytes (--http-max-header-bytes, default 65536 = 64 KiB)
	// bounds a request's line and headers, in bytes (1 KiB..1 MiB); larger is
	// answered 431 by net/http.
	HTTPMaxHeaderBytes int
	// HTTPMaxConnections (--http-max-connections, default 1024) caps the open
	// connections of the API (1..1048576): beyond it, new connections wait
	// in the listen backlog, unserved, until one closes. Idle keep-alive
	// connections count, until HTTPIdleTimeout. Keep it under the process's
	// file descriptor limit (ulimit -n), which the embedded etcd shares.
	HTTPMaxConnections int
	// Events bounds the event stream (GET /v1/events; events_config.go).
	Events EventsConfig
	// AdvertiseHTTP (--advertise-http, default: the address HTTP listens on)
	// is the address this locationd publishes as its own in the recovery
	// controller's election (`meshctl controllers`), for one that listens
	// on 0.0.0.0 or behind NAT.
	AdvertiseHTTP string
	// Prefix (--prefix, default /meshloc) and Cluster (--cluster, default
	// "default") select the keys /<prefix>/<cluster>/... (design.md §2), so
	// several meshloc clusters can share one etcd.
	Prefix  string
	Cluster string
	// LogLevel (--log-level, default info) is the least level written:
	// debug, info, warn, error or disabled, as on every meshloc binary
	// (internal/logging). It does not set the embedded etcd's logger: see
	// EtcdLogLevel.
	LogLevel string
	// LogFormat (--log-format, default json): json (one object a line) or
	// console (readable text), as on every meshloc binary.
	LogFormat string
	// EtcdLogLevel (--etcd-log-level, default error) is the level of the
	// embedded etcd's own logger (zap, JSON on stderr): debug, info, warn,
	// error, panic or fatal. Above error it hides etcd's real failures; note
	// that etcd also logs a few "serving ... failed" errors while it closes.
	EtcdLogLevel string
	// RequestTimeout (--request-timeout, default 5s) bounds the etcd reads of
	// one API request, so a lost etcd gives 503 unavailable instead of a hung
	// caller. Keep it above etcd's election time (≈1s by default).
	RequestTimeout time.Duration
	// ShutdownTimeout (--shutdown-timeout, default 10s) bounds how long Run
	// waits, after its context is done, for API requests in flight to finish
	// before it closes their connections.
	ShutdownTimeout time.Duration
	// The embedded etcd's size (internal/embedetcd, maintain.go;
	// docs/operating/etcd.md). Unused with EtcdEndpoints: an external etcd is
	// run with its own flags (--quota-backend-bytes,
	// --auto-compaction-retention); locationd warns when it does not compact.
	//
	// EtcdQuotaBytes (--etcd-quota-bytes, default 2147483648 = 2 GiB,
	// etcd's own) is the size the member's file may reach: past it etcd
	// raises its NOSPACE alarm and refuses every write until the alarm is
	// disarmed. 1 MiB..8 GiB (etcd advises no more). The compaction keeps
	// the data at half of it under any write rate it can follow.
	EtcdQuotaBytes int64
	// EtcdCompactionRetention (--etcd-compaction-retention, default 1m) is
	// how long etcd keeps past revisions: long enough for every reader of
	// meshloc to go from a list to its watch, or to resume a watch, without
	// listing again (docs/design.md §2); compacted every tenth of it, and
	// harder near the quota. 0 turns compaction off (the history then
	// grows until the quota: for an audit that replays it). 0 or 1s..24h.
	EtcdCompactionRetention time.Duration
	// EtcdDefrag (--etcd-defrag, default true) defragments the member when
	// its file is mostly free space, at most every 5 minutes; the member
	// answers nothing while it copies its data in use to a new file.
	EtcdDefrag bool
	// EtcdStartTimeout (--etcd-start-timeout, default 30s) bounds the start of
	// the embedded etcd (it replays its WAL at start: a large data dir is slow;
	// a member of a cluster is ready only once a quorum of members answers,
	// so start the members of a new cluster together).
	EtcdStartTimeout time.Duration
	// RelocationTimeout (--relocation-timeout, default 10s) is the deadline of
	// a relocation asked with POST /v1/relocations without timeoutMs. The
	// request itself waits up to RelocationSlack longer: the node's own hard
	// stop comes 5 s after the deadline.
	RelocationTimeout time.Duration

	// The recovery controller (package recovery): every locationd is a
	// candidate in one etcd election; the leader reports orphaned objects
	// and, with RecoverOrphans, re-activates them on live nodes.

	// ElectionTTL (--election-ttl, default 5s) is the TTL of the election
	// lease: a leader that dies or is cut off from etcd is replaced within
	// about this long (a leader that stops cleanly hands over at once).
	// Whole seconds, 1s..1h.
	ElectionTTL time.Duration
	// RecoverOrphans (--recover-orphans, default false): the leader
	// re-activates orphaned objects on live nodes before anyone calls them
	// (memory objects restart from fresh state, and their first call is
	// answered state_lost). Off: orphans are only reported, and recovered by
	// their next call.
	RecoverOrphans bool
	// RecoveryRate (--recovery-rate, default 10,000) caps the leader's
	// recoveries: at most this many orphaned objects per second. It
	// recovers them in batches that share etcd requests (each object its
	// own nested transaction and compares), so a dead node's 100,000
	// objects take about 10 s at the default; a lower cap spreads their
	// etcd writes, and the watch events every location cache receives for
	// them, over longer.
	RecoveryRate float64

	// Transport security (pkg/mtls). CertFile, KeyFile and TrustedCAFile
	// (--cert-file, --key-file, --trusted-ca-file, all or none) are this
	// locationd's certificate (role locationd, its name), its key and the
	// cluster CA: set, the API serves HTTPS and requires a client
	// certificate of the CA (a viewer may only GET; relocations, drains,
	// rebalances and groups need an operator or admin: 403
	// permission_denied), locationd reaches the nodes' AdminService with
	// mutual TLS, and the embedded etcd serves its client port with the
	// same files (--listen-client https://), authenticates clients by
	// certificate and, at its first start, gets its users and roles
	// (internal/etcdauth) and authentication enabled. Unset, everything is
	// plaintext, and a non-loopback --http, --listen-client or --listen-peer
	// is refused unless Insecure.
	CertFile, KeyFile, TrustedCAFile string
	// CRLFile (--crl-file): the cluster CA's revocation list (meshctl certs
	// revoke): a certificate it lists is refused by the API, by the node
	// connections and by the embedded etcd's ports; read again on SIGHUP
	// (etcd reads it at each new connection).
	CRLFile string
	// PeerCertFile, PeerKeyFile and PeerTrustedCAFile secure the embedded
	// etcd's peer port (--listen-peer https://) of a multi-member cluster.
	PeerCertFile, PeerKeyFile, PeerTrustedCAFile string
	// Insecure (--insecure) allows plaintext on non-loopback addresses.
	Insecure bool
	// How this process reaches etcd (embedded or not): its CA (--etcd-cacert;
	// for the embedded etcd, default --trusted-ca-file), a client
	// certificate (--etcd-cert, --etcd-key: etcd-locationd of `meshctl certs
	// init`), or a user and password file (--etcd-user,
	// --etcd-password-file).
	EtcdCACert, EtcdCert, EtcdKey, EtcdUser, EtcdPasswordFile string
	// EtcdSetupAuth (--etcd-setup-auth): with --etcd-endpoints, create the
	// users and roles of internal/etcdauth and enable authentication if it
	// is off (give root's credentials for that run). The embedded etcd with
	// TLS always does it at its first start.
	EtcdSetupAuth bool
	// EtcdNodeUsers (--etcd-node-users): the nodes that get their own etcd
	// user (meshloc-node-<name>, which may write that node's owner key and
	// no other) when authentication is set up. Nodes added later: `meshctl
	// etcd add-nodes`.
	EtcdNodeUsers []string
}

// TLSFiles are the API's (and the embedded etcd's client port's) files.
func (c *Config) TLSFiles() mtls.Files {
	return mtls.Files{CA: c.TrustedCAFile, Cert: c.CertFile, Key: c.KeyFile, CRL: c.CRLFile}
}

// PeerTLSFiles are the embedded etcd's peer port's files.
func (c *Config) PeerTLSFiles() mtls.Files {
	f := mtls.Files{CA: c.PeerTrustedCAFile, Cert: c.PeerCertFile, Key: c.PeerKeyFile}
	if f.Enabled() {
		f.CRL = c.CRLFile
	}
	return f
}

// Etcd is how this process reaches etcd at endpoints.
func (c *Config) Etcd(endpoints []string) mtls.Etcd {
	e := mtls.Etcd{Endpoints: endpoints, CACert: c.EtcdCACert, Cert: c.EtcdCert, Key: c.EtcdKey, User: c.EtcdUser, PasswordFile: c.EtcdPasswordFile}
	if e.CACert == "" && c.Embedded() && c.TLSFiles().Enabled() {
		e.CACert = c.TrustedCAFile
	}
	return e
}

// RelocationSlack is how much longer than a relocation's deadline POST
// /v1/relocations waits for the node's answer before it gives up waiting.
const RelocationSlack = 15 * time.Second

// NodeListTimeout bounds each node's answer to GET /v1/relocations; a node
// that does not answer in time is listed as unreachable.
const NodeListTimeout = 2 * time.Second

// ReadyTimeout bounds the etcd read of /readyz: a store that cannot answer a
// linearizable read in 1s is reported not ready.
const ReadyTimeout = time.Second

// DefaultConfig is the configuration of docs/design.md §10.
func DefaultConfig() Config {
	return Config{
		DataDir:          "./data/locationd",
		ListenClient:     "http://127.0.0.1:2379",
		ListenPeer:       "http://127.0.0.1:2380",
		HTTP:             "127.0.0.1:7070",
		Prefix:           keyspace.DefaultPrefix,
		Cluster:          keyspace.DefaultCluster,
		LogLevel:         "info",
		LogFormat:        "json",
		EtcdLogLevel:     "error",
		RequestTimeout:   5 * time.Second,
		ShutdownTimeout:  10 * time.Second,
		EtcdStartTimeout: 30 * time.Second,

		EtcdQuotaBytes:          embedetcd.DefaultQuotaBytes,
		EtcdCompactionRetention: embedetcd.DefaultMaintenance().Retention,
		EtcdDefrag:              embedetcd.DefaultMaintenance().Defrag,

		MemberName:          DefaultMemberName,
		InitialClusterState: ClusterStateNew,
		InitialClusterToken: DefaultClusterToken,

		RelocationTimeout: 10 * time.Second,

		HTTPReadHeaderTimeout: 5 * time.Second,
		HTTPReadTimeout:       10 * time.Second,
		HTTPWriteTimeout:      30 * time.Second,
		HTTPIdleTimeout:       2 * time.Minute,
		HTTPMaxHeaderBytes:    64 << 10,
		HTTPMaxConnections:    1024,
		Events:                DefaultEventsConfig(),

		ElectionTTL:  5 * time.Second,
		RecoveryRate: recovery.DefaultRate,
	}
}

// AddFlags registers the flags of c on fs, with c's current values as their
// defaults (call it on DefaultConfig()).
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory of the embedded etcd's data (in <data-dir>/etcd); unused with --etcd-endpoints")
	fs.StringVar(&c.ListenClient, "listen-client", c.ListenClient, "client URL of the embedded etcd")
	fs.StringVar(&c.ListenPeer, "listen-peer", c.ListenPeer, "peer URL of the embedded etcd")
	fs.Var(cliutil.NewList(&c.EtcdEndpoints), "etcd-endpoints", "comma list of an existing etcd cluster's client URLs; set: no embedded etcd")
	fs.StringVar(&c.MemberName, "name", c.MemberName, "member name of the embedded etcd, unique in its cluster")
	fs.StringVar(&c.InitialCluster, "initial-cluster", c.InitialCluster, "members of the embedded etcd's cluster, name=peerURL,… (with --name=--listen-peer among them); empty: a single member")
	fs.StringVar(&c.InitialClusterState, "initial-cluster-state", c.InitialClusterState, "new (bootstrap the members of --initial-cluster together) or existing (join a running cluster after etcdctl member add)")
	fs.StringVar(&c.InitialClusterToken, "initial-cluster-token", c.InitialClusterToken, "token of the embedded etcd's cluster, the same on every member")
	fs.StringVar(&c.HTTP, "http", c.HTTP, "host:port of the location API, /metrics, /healthz and /readyz")
	fs.DurationVar(&c.HTTPReadHeaderTimeout, "http-read-header-timeout", c.HTTPReadHeaderTimeout, "bound on reading a request's line and headers (at most --http-read-timeout)")
	fs.DurationVar(&c.HTTPReadTimeout, "http-read-timeout", c.HTTPReadTimeout, "bound on reading a whole request, body included; a client that stalls in its body is disconnected")
	fs.DurationVar(&c.HTTPWriteTimeout, "http-write-timeout", c.HTTPWriteTimeout, "bound from a request read to its answer written (above --request-timeout); relocations, joins, rebalances and drains lift it to their own bound")
	fs.DurationVar(&c.HTTPIdleTimeout, "http-idle-timeout", c.HTTPIdleTimeout, "a keep-alive connection without a new request is closed after this long")
	fs.IntVar(&c.HTTPMaxHeaderBytes, "http-max-header-bytes", c.HTTPMaxHeaderBytes, "bound on a request's line and headers, in bytes (1024..1048576)")
	fs.IntVar(&c.HTTPMaxConnections, "http-max-connections", c.HTTPMaxConnections, "most open API connections (1..1048576); more wait in the listen backlog until one closes")
	c.Events.addFlags(fs)
	fs.StringVar(&c.AdvertiseHTTP, "advertise-http", c.AdvertiseHTTP, "host:port of the API published in the recovery controller's election (default: the address --http listens on)")
	fs.StringVar(&c.Prefix, "prefix", c.Prefix, "etcd key prefix")
	fs.StringVar(&c.Cluster, "cluster", c.Cluster, "cluster name: keys live under <prefix>/<cluster>/")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: debug, info, warn, error or disabled")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log format: json (one object a line) or console (readable text)")
	fs.StringVar(&c.EtcdLogLevel, "etcd-log-level", c.EtcdLogLevel, "level of the embedded etcd's own log: debug, info, warn, error, panic, fatal")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", c.RequestTimeout, "bound on the etcd reads of one API request")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "bound on the wait for API requests in flight at shutdown")
	fs.DurationVar(&c.EtcdStartTimeout, "etcd-start-timeout", c.EtcdStartTimeout, "bound on the start of the embedded etcd")
	fs.Int64Var(&c.EtcdQuotaBytes, "etcd-quota-bytes", c.EtcdQuotaBytes, "size in bytes the embedded etcd's file may reach before etcd refuses every write (NOSPACE); 1 MiB..8 GiB")
	fs.DurationVar(&c.EtcdCompactionRetention, "etcd-compaction-retention", c.EtcdCompactionRetention, "how long the embedded etcd keeps past revisions before it compacts them (harder near the quota); 0: never compact")
	fs.BoolVar(&c.EtcdDefrag, "etcd-defrag", c.EtcdDefrag, "defragment the embedded etcd when its file is mostly free space (at most every 5 minutes; it answers nothing meanwhile)")
	fs.DurationVar(&c.RelocationTimeout, "relocation-timeout", c.RelocationTimeout, "deadline of a relocation asked through the API without timeoutMs")
	fs.DurationVar(&c.ElectionTTL, "election-ttl", c.ElectionTTL, "a dead recovery controller leader is replaced within this long (its election lease is granted 1s shorter; 3s or more for the bound to hold)")
	fs.BoolVar(&c.RecoverOrphans, "recover-orphans", c.RecoverOrphans, "the leading recovery controller re-activates orphaned objects on live nodes (false: only reports them)")
	fs.Float64Var(&c.RecoveryRate, "recovery-rate", c.RecoveryRate, "the recovery controller's cap: at most this many orphaned objects recovered per second (in batches that share etcd requests)")
	fs.StringVar(&c.CertFile, "cert-file", c.CertFile, "this locationd's certificate (role locationd): with --key-file and --trusted-ca-file the API is HTTPS with client certificates, and so is the embedded etcd's client port")
	fs.StringVar(&c.KeyFile, "key-file", c.KeyFile, "the key of --cert-file")
	fs.StringVar(&c.TrustedCAFile, "trusted-ca-file", c.TrustedCAFile, "the cluster CA every client's certificate must chain to")
	fs.StringVar(&c.CRLFile, "crl-file", c.CRLFile, "the cluster CA's revocation list (meshctl certs revoke; DER or PEM): a certificate it lists is refused on the API, toward the nodes and on the embedded etcd's ports; read again on SIGHUP")
	fs.StringVar(&c.PeerCertFile, "peer-cert-file", c.PeerCertFile, "the embedded etcd's peer certificate (multi-member; --listen-peer https://)")
	fs.StringVar(&c.PeerKeyFile, "peer-key-file", c.PeerKeyFile, "the key of --peer-cert-file")
	fs.StringVar(&c.PeerTrustedCAFile, "peer-trusted-ca-file", c.PeerTrustedCAFile, "the CA of the embedded etcd's peers")
	fs.BoolVar(&c.Insecure, "insecure", c.Insecure, "allow plaintext on non-loopback addresses (no TLS flags)")
	fs.StringVar(&c.EtcdCACert, "etcd-cacert", c.EtcdCACert, "CA of etcd's server certificate (default with the embedded etcd: --trusted-ca-file)")
	fs.StringVar(&c.EtcdCert, "etcd-cert", c.EtcdCert, "client certificate for etcd (its common name is the etcd user: etcd-locationd.crt of meshctl certs init)")
	fs.StringVar(&c.EtcdKey, "etcd-key", c.EtcdKey, "the key of --etcd-cert")
	fs.StringVar(&c.EtcdUser, "etcd-user", c.EtcdUser, "etcd user (password authentication; with --etcd-password-file)")
	fs.StringVar(&c.EtcdPasswordFile, "etcd-password-file", c.EtcdPasswordFile, "file holding --etcd-user's password")
	fs.Var(cliutil.NewList(&c.EtcdNodeUsers), "etcd-node-users", "comma list of node names that get their own etcd user when authentication is set up (the embedded etcd with TLS, or --etcd-setup-auth); later nodes: meshctl etcd add-nodes")
	fs.BoolVar(&c.EtcdSetupAuth, "etcd-setup-auth", c.EtcdSetupAuth, "with --etcd-endpoints: create meshloc's etcd users and roles and enable authentication (run once with root's credentials)")
}

// validateTLS checks the transport security flags.
