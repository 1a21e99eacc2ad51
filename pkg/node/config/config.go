// Package config owns a meshnode's operator settings: the Config struct,
// its defaults, its flags and their MESHNODE_ environment mirror, and the
// validation of every field and of the relations between them. It
// decides nothing at run time; pkg/node reads it.
package config

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/meshloc/meshloc/internal/logging"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/admission"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/mtls"
	"github.com/meshloc/meshloc/pkg/tracing"
	"github.com/meshloc/meshloc/pkg/traffic"
	"github.com/meshloc/meshloc/pkg/wire"
)

// ErrInvalidConfig: a Config field or a relation between fields is wrong.
var ErrInvalidConfig = errors.New("node: invalid config")

// Config of one meshnode (docs/design.md §10). Every field has a flag and an
// environment mirror MESHNODE_<FLAG> (e.g. MESHNODE_LEASE_TTL).
type Config struct {
	// Name is the owner id: stable across restarts (required).
	Name string
	// EtcdEndpoints of the store (default http://127.0.0.1:2379: locationd's embedded etcd).
	EtcdEndpoints []string
	// EtcdWatchEndpoints (--etcd-watch-endpoints, default empty: straight
	// to etcd) are the addresses of a watch fan-out (`locationd
	// watch-proxy`, docs/design.md §5): the location cache and the owner
	// directory follow etcd through it, so etcd serves one watch for every
	// node instead of one per node. Reads and transactions still go to
	// EtcdEndpoints under the node's own identity. It is reached with the
	// same TLS files as etcd (EtcdCACert, EtcdCert, EtcdKey), never with
	// EtcdUser's password.
	EtcdWatchEndpoints []string
	// Listen is the gRPC address (default 127.0.0.1:7100).
	Listen string
	// Advertise is the address other nodes dial (default: Listen).
	Advertise string
	// HTTP serves /metrics, /healthz and /readyz (default 127.0.0.1:7101;
	// empty: off). /readyz fails while the node is not serving, its lease
	// is not valid, or etcd has its NOSPACE alarm on (etcdspace.go).
	HTTP string
	// AdvertiseHTTP is the HTTP address the owner descriptor publishes
	// (default: HTTP), for a node listening on 0.0.0.0 or behind NAT.
	AdvertiseHTTP string
	// LeaseTTL of the owner lease (default 5 s; etcd grants at least ~2 s).
	LeaseTTL time.Duration
	// LeaseMargin is subtracted from the lease deadline (0: TTL/5, at least
	// 100 ms): the node stops starting work that long before its lease
	// could have run out.
	LeaseMargin time.Duration
	// Weight for placement; 0 makes a pure gateway: nothing is placed or moved onto it.
	Weight int
	// Types the node hosts (built-in type names; empty: all registered).
	Types []string
	// Prefix and Cluster of the etcd layout.
	Prefix, Cluster string
	// ApplicationVersion advertised; objects move only between equal versions.
	ApplicationVersion string
	// CallTimeout bounds one call handled by this node, forwards included (default 10 s).
	CallTimeout time.Duration
	// DedupWindow is how long an operation id may be retried (default 60 s).
	DedupWindow time.Duration
	// SleepAfter is how long an object of a type that may sleep stays
	// idle before it sleeps, for types that set no bound of their own
	// (actor.Type.SleepAfter); 0: never (docs/developing/lifecycle.md).
	SleepAfter time.Duration
	// MaxObjects and MemoryLimit (bytes of Go heap in use) bound what the
	// node holds awake (docs/developing/lifecycle.md, "Memory limits");
	// 0: no bound. Over 90% of either it puts its least recently used
	// objects that may sleep to sleep; at either it takes no new object.
	MaxObjects  int
	MemoryLimit int64
	// AcquireWait: how long to wait at start for a crashed predecessor's owner
	// key to expire (default: LeaseTTL + 1 s).
	AcquireWait time.Duration
	// LogLevel (--log-level, default info): debug, info, warn, error or
	// disabled, as on every meshloc binary (the node checks it; the binary
	// makes its logger from it).
	LogLevel string
	// LogFormat (--log-format, default json): json or console.
	LogFormat string
	// RelocationTimeout is a relocation's deadline from its start (default 10 s).
	RelocationTimeout time.Duration
	// CutoverFallback: how long a target waits after READY for CUTOVER
	// before committing on its own (default 2 s; less than RelocationTimeout).
	CutoverFallback time.Duration
	// RelayWait bounds how long a source waits for the relayed reply of a
	// request it handed over before answering Unavailable (the caller then
	// retries with the same operation id; default 5 s).
	RelayWait time.Duration
	// ForwardWindow: how long requests for an object that moved away are
	// forwarded to its new owner before they are redirected (default 5 s).
	ForwardWindow time.Duration
	// ChunkBytes is the STATE chunk size (default 1 MiB).
	ChunkBytes int
	// BatchWrites: the relocation writes in flight on this node (intents,
	// commits, preserves) share etcd round trips, each its own nested
	// transaction (default true).
	BatchWrites bool
	// EagerCutoverBytes: a state of at most this many bytes moves with an
	// eager cutover (PREPARE, STATE, DATA and CUTOVER sent at once, without
	// waiting for READY; default 64 KiB; 0: never), if it is one chunk.
	EagerCutoverBytes int
	// PrecopyMinBytes: a state of at least this many bytes moves with
	// pre-copy: a snapshot streams while the object still serves, and
	// after the seal only the chunks that changed since (default 1 MiB;
	// 0: never). The interruption then no longer contains the bulk.
	PrecopyMinBytes int
	// OneWriteBulk: a bulk move writes its objects' intents once, into its
	// own key relocations/<bulk id>, and each record only once, by its
	// commit or its preserve (default true; docs/design.md §4, "Bulk
	// moves"). false: each record carries its intent, as a move of one
	// object does (two writes per record). A node accepts both as a
	// target whatever it is set to.
	OneWriteBulk bool
	// NodeBudgetBytes bounds STATE bytes in flight from this node (default 64 MiB).
	NodeBudgetBytes int64
	// PeerBudgetBytes bounds STATE bytes in flight to one peer (default 16 MiB).
	PeerBudgetBytes int64
	// ExecLog is the path of the execution log (empty, the default: none):
	// one JSON line appended per request (or timer tick) executed by an
	// object hosted here, written before the reply leaves, for verification
	// runs (internal/verify.ReadExecLogFiles). A restarted node appends to
	// the same file; its owner generation tells the lives apart.
	ExecLog string
	// DurableMaxBytes bounds the persisted value of one durable object
	// (state, timers and replies of its changes, JSON-encoded; default
	// 1 MiB): a change that would persist more is refused with
	// CODE_STATE_TOO_LARGE and rolled back. It must stay below etcd's
	// request limit (--max-request-bytes, 1.5 MiB by default); raise both
	// together (docs/design.md §5a).
	DurableMaxBytes int
	// StateStore is where durable objects' state lives: "etcd" (the
	// default, or empty: beside the records) or a PostgreSQL connection
	// string, postgres://… or libpq's key=value form (docs/operating/
	// state-stores.md). The records stay in etcd either way.
	StateStore string
	// Tracing is where the node's OpenTelemetry traces go, and how they
	// are sampled (off by default; docs/operating/tracing.md). The process
	// that runs the node sets it up (tracing.Setup); a node only traces
	// once it is.
	Tracing tracing.Config
	// MaxTxnOps must equal the etcd cluster's --max-txn-ops (default 128,
	// etcd's default): a group moves in one transaction, so a group may have
	// at most MaxTxnOps − 4 members (groups.go); Join beyond it, and the
	// relocation of a larger group, are refused up front.
	MaxTxnOps int
	// MaxRequestBytes must equal the etcd cluster's --max-request-bytes
	// (default 1.5 MiB): it bounds the bytes of a group's transactions.
	MaxRequestBytes int
	// BackgroundLatencyTarget: while this node serves calls and the
	// process's run-queue wait p99 (how long a runnable goroutine waits for
	// a processor) is above it, background relocations (every one not asked
	// as foreground: a rebalance's, an operator's) start at a lower rate, so
	// that they do not slow the calls (default 1 ms; 0: never paced;
	// pkg/admission). Drains and Actor Joins are foreground.
	BackgroundLatencyTarget time.Duration
	// BackgroundMinRate: background relocations start at this many units
	// per second at least, however slow the calls (default 10; a
	// relocation is one unit and one per MiB of its state).
	BackgroundMinRate float64
	// DrainConcurrency is how many objects a drain moves at a time
	// (default 512), in bulk moves of up to 128 objects to one target
	// each: more empties a node faster, and loads its peers more.
	DrainConcurrency int
	// DrainTimeout is how long a drain (SIGTERM, meshctl drain) may go
	// without moving an object (default 60 s): a drain that keeps moving
	// objects goes on (at most an hour), one that stalls ends, and the
	// objects not moved by then are reported and lost when the node
	// stops. Relocations in flight then end by their own deadline.
	DrainTimeout time.Duration

	// Messages between objects (docs/design.md §13).

	// OutboxMessages and OutboxBytes bound one object's outbox (defaults
	// 1024 messages, 1 MiB): a handler's Send beyond them is refused with
	// actor.ErrOutboxFull (resource_exhausted). A durable object's outbox
	// is persisted with its state, within --durable-max-bytes.
	OutboxMessages int
	OutboxBytes    int
	// TrafficEdges bounds the edges (sender → destination) this node's
	// traffic sketch keeps (default 4096; pkg/traffic); TrafficHalfLife is
	// how fast old traffic fades from it (default 1 min); TrafficSample
	// counts one message in that many, weighted accordingly (default 1:
	// every message).
	TrafficEdges    int
	TrafficHalfLife time.Duration
	TrafficSample   int

	// Bounds on what peers may make this node hold (a peer is any process
	// that reaches the gRPC port). A PREPARE beyond one is refused with
	// CODE_RESOURCE_EXHAUSTED before anything is staged.

	// MaxIncomingStages bounds the relocations this node receives at a time
	// (default 4096: a stage of a small object holds a few KiB; the bytes
	// bound holds the large ones).
	MaxIncomingStages int
	// MaxIncomingStagesPerPeer bounds them per source owner (default 1024:
	// a busy node moves many objects to one peer at once — a drain's bulk
	// moves, a rebalance, a storm — and the bytes bound still holds).
	MaxIncomingStagesPerPeer int
	// MaxIncomingBytes bounds the payload bytes the incoming stages
	// announce, together (default 2 GiB). A stage's buffer grows with the
	// bytes that arrive, not with the announcement, so memory in use is
	// usually far less.
	MaxIncomingBytes int64
	// GRPCMaxStreams bounds the concurrent gRPC streams (calls, relocation
	// streams) of one connection (default 1024).
	GRPCMaxStreams int
	// GRPCMaxMessageBytes bounds one gRPC message this node receives
	// (default 0: the larger of a call's limit, about 1.06 MiB, and a STATE
	// chunk with its framing); at least --chunk-bytes + 64 KiB.
	GRPCMaxMessageBytes int

	// TLS: the node's certificate (it names the node: common name = Name,
	// role node), its key and the cluster CA. Set, every connection to the
	// gRPC port must present a certificate of the CA, each RPC is allowed
	// by the caller's role (pkg/mtls), and the node dials its peers with
	// its certificate and checks theirs. Unset, the port is plaintext and
	// the node refuses to listen on a non-loopback address unless Insecure.
	CertFile, KeyFile, TrustedCAFile string
	// CRLFile (--crl-file): the cluster CA's revocation list (meshctl certs
	// revoke): a peer or caller whose certificate it lists is refused;
	// read again on SIGHUP with the certificate.
	CRLFile string
	// Insecure allows plaintext on a non-loopback address.
	Insecure bool
	// Etcd's TLS and authentication: its CA, a client certificate (etcd's
	// certificate authentication), or a user and a password file.
	EtcdCACert, EtcdCert, EtcdKey, EtcdUser, EtcdPasswordFile string
}

// TLSFiles are the node's certificate files (mtls).
func (c *Config) TLSFiles() mtls.Files {
	return mtls.Files{CA: c.TrustedCAFile, Cert: c.CertFile, Key: c.KeyFile, CRL: c.CRLFile}
}

// Etcd is how the node reaches etcd.
func (c *Config) Etcd() mtls.Etcd {
	return mtls.Etcd{Endpoints: c.EtcdEndpoints, CACert: c.EtcdCACert, Cert: c.EtcdCert, Key: c.EtcdKey, User: c.EtcdUser, PasswordFile: c.EtcdPasswordFile}
}

// EtcdWatch is how the node reaches its watch fan-out (EtcdWatchEndpoints).
func (c *Config) EtcdWatch() mtls.Etcd {
	return mtls.Etcd{Endpoints: c.EtcdWatchEndpoints, CACert: c.EtcdCACert, Cert: c.EtcdCert, Key: c.EtcdKey}
}

// Bounds of --durable-max-bytes.
const (
	DefaultDurableMaxBytes = 1 << 20
	MinDurableMaxBytes     = 4 << 10
	MaxDurableMaxBytes     = 64 << 20
)

// MaxDrainConcurrency bounds DrainOptions.Concurrency and --drain-concurrency.
const MaxDrainConcurrency = 4096

// MaxClockSkew is how much later than this node's --relocation-timeout a
// PREPARE's deadline may lie (the source's clock may run ahead).
const MaxClockSkew = time.Second

// MaxGRPCMessageBytes is GRPCMaxMessageBytes with its default applied.
func (c *Config) MaxGRPCMessageBytes() int {
	if c.GRPCMaxMessageBytes > 0 {
		return c.GRPCMaxMessageBytes
	}
	return max(wire.MaxMessageBytes, c.ChunkBytes+64<<10)
}

// Default returns every field's default (docs/reference/configuration.md).
func Default() Config {
	return Config{
		EtcdEndpoints:           []string{"http://127.0.0.1:2379"},
		Listen:                  "127.0.0.1:7100",
		HTTP:                    "127.0.0.1:7101",
		LeaseTTL:                5 * time.Second,
		Weight:                  1,
		Prefix:                  keyspace.DefaultPrefix,
		Cluster:                 keyspace.DefaultCluster,
		ApplicationVersion:      "1",
		CallTimeout:             10 * time.Second,
		DedupWindow:             60 * time.Second,
		LogLevel:                "info",
		LogFormat:               "json",
		RelocationTimeout:       10 * time.Second,
		CutoverFallback:         2 * time.Second,
		RelayWait:               5 * time.Second,
		ForwardWindow:           5 * time.Second,
		ChunkBytes:              1 << 20,
		EagerCutoverBytes:       64 << 10,
		PrecopyMinBytes:         1 << 20,
		OneWriteBulk:            true,
		BatchWrites:             true,
		NodeBudgetBytes:         64 << 20,
		PeerBudgetBytes:         16 << 20,
		DurableMaxBytes:         DefaultDurableMaxBytes,
		DrainConcurrency:        512,
		BackgroundLatencyTarget: admission.DefaultLatencyTarget,
		BackgroundMinRate:       admission.DefaultMinRate,
		MaxTxnOps:               authority.DefaultMaxTxnOps,
		MaxRequestBytes:         authority.DefaultMaxRequestBytes,
		DrainTimeout:            60 * time.Second,
		OutboxMessages:          actor.DefaultOutboxMessages,
		OutboxBytes:             actor.DefaultOutboxBytes,
		TrafficEdges:            traffic.DefaultCapacity,
		TrafficHalfLife:         time.Minute,
		TrafficSample:           1,

		MaxIncomingStages:        4096,
		MaxIncomingStagesPerPeer: 1024,
		MaxIncomingBytes:         2 << 30,
		GRPCMaxStreams:           1024,
	}
}

type listFlag struct{ v *[]string }

func (l listFlag) String() string {
	if l.v == nil {
		return ""
	}
	return strings.Join(*l.v, ",")
}

func (l listFlag) Set(s string) error {
	*l.v = nil
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l.v = append(*l.v, p)
		}
	}
	return nil
}

// AddFlags registers the flags on fs, with defaults from c.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Name, "name", c.Name, "owner id of this node, stable across restarts (required)")
	fs.Var(listFlag{&c.EtcdEndpoints}, "etcd-endpoints", "comma-separated etcd client URLs")
	fs.Var(listFlag{&c.EtcdWatchEndpoints}, "etcd-watch-endpoints", "comma-separated URLs of a watch fan-out (locationd watch-proxy) the location cache follows etcd through (empty: straight to etcd)")
	fs.StringVar(&c.Listen, "listen", c.Listen, "gRPC listen address")
	fs.StringVar(&c.Advertise, "advertise", c.Advertise, "address other nodes dial (default: --listen)")
	fs.StringVar(&c.HTTP, "http", c.HTTP, "HTTP address for /metrics, /healthz and /readyz (empty: off)")
	fs.StringVar(&c.AdvertiseHTTP, "advertise-http", c.AdvertiseHTTP, "HTTP address published in the owner descriptor (default: --http)")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", c.LeaseTTL, "owner lease TTL")
	fs.DurationVar(&c.LeaseMargin, "lease-margin", c.LeaseMargin, "safety margin before the lease deadline (0: TTL/5, at least 100ms)")
	fs.IntVar(&c.Weight, "weight", c.Weight, "placement weight; 0 makes a pure gateway")
	fs.Var(listFlag{&c.Types}, "types", "comma-separated types to host (default: all)")
	fs.StringVar(&c.Prefix, "prefix", c.Prefix, "etcd key prefix")
	fs.StringVar(&c.Cluster, "cluster", c.Cluster, "cluster name under the prefix")
	fs.StringVar(&c.ApplicationVersion, "app-version", c.ApplicationVersion, "application version advertised")
	fs.DurationVar(&c.CallTimeout, "call-timeout", c.CallTimeout, "bound on one call, forwards included")
	fs.DurationVar(&c.DedupWindow, "dedup-window", c.DedupWindow, "how long an operation id may be retried")
	fs.DurationVar(&c.SleepAfter, "sleep-after", c.SleepAfter, "idle time after which an object of a type that may sleep (durable, or opted in) sleeps, unless its type sets its own; 0: never")
	fs.IntVar(&c.MaxObjects, "max-objects", c.MaxObjects, "most objects this node holds awake; over 90% it puts its least recently used objects that may sleep to sleep, at the bound it takes no new object (resource_exhausted: callers go to another node); 0: no bound")
	fs.Int64Var(&c.MemoryLimit, "memory-limit", c.MemoryLimit, "bytes of Go heap in use the node's objects may take, as --max-objects: over 90% objects sleep, at the bound no new object is taken; 0: no bound")
	fs.DurationVar(&c.AcquireWait, "acquire-wait", c.AcquireWait, "wait at start for a crashed predecessor's owner key (default: lease TTL + 1s)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: debug, info, warn, error or disabled")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log format: json (one object a line) or console (readable text)")
	fs.DurationVar(&c.RelocationTimeout, "relocation-timeout", c.RelocationTimeout, "deadline of one relocation")
	fs.DurationVar(&c.CutoverFallback, "cutover-fallback", c.CutoverFallback, "how long a target waits for CUTOVER after READY before committing alone")
	fs.DurationVar(&c.RelayWait, "relay-wait", c.RelayWait, "how long a source waits for a relayed reply")
	fs.DurationVar(&c.ForwardWindow, "forward-window", c.ForwardWindow, "how long requests for a moved object are forwarded to its new owner")
	fs.IntVar(&c.ChunkBytes, "chunk-bytes", c.ChunkBytes, "STATE chunk size in bytes")
	fs.BoolVar(&c.BatchWrites, "batch-writes", c.BatchWrites, "relocation writes in flight (intents, commits, preserves) share etcd round trips, each its own nested transaction")
	fs.IntVar(&c.EagerCutoverBytes, "eager-cutover-bytes", c.EagerCutoverBytes, "a state of at most this many bytes is sent with DATA and CUTOVER at once, without waiting for READY (0: never; a state of one chunk only)")
	fs.BoolVar(&c.OneWriteBulk, "one-write-bulk", c.OneWriteBulk, "a bulk move writes its objects' intents once, into its own key, and each record once (false: an intent in every record, two writes per record)")
	fs.IntVar(&c.PrecopyMinBytes, "precopy-min-bytes", c.PrecopyMinBytes, "a state of at least this many bytes is pre-copied: streamed while the object serves, then only the chunks changed since are sent after the seal (0: never)")
	fs.Int64Var(&c.NodeBudgetBytes, "node-budget-bytes", c.NodeBudgetBytes, "STATE bytes in flight from this node")
	fs.Int64Var(&c.PeerBudgetBytes, "peer-budget-bytes", c.PeerBudgetBytes, "STATE bytes in flight to one peer")
	fs.StringVar(&c.ExecLog, "exec-log", c.ExecLog, "append one JSON line per executed request or timer tick to this file (verification runs; empty: off)")
	fs.IntVar(&c.DurableMaxBytes, "durable-max-bytes", c.DurableMaxBytes, "largest persisted value of one durable object (dcounter, dbank, …) in bytes; a change over it is refused with state_too_large. Keep it below etcd's --max-request-bytes (1.5 MiB by default) and raise both together")
	fs.StringVar(&c.StateStore, "state-store", c.StateStore, "where durable objects' state lives: etcd (beside the records) or a PostgreSQL connection string (postgres://user@host:5432/db?sslmode=verify-full; libpq's key=value form, passfile and PG* variables work too); the records stay in etcd")
	fs.IntVar(&c.MaxTxnOps, "max-txn-ops", c.MaxTxnOps, "the etcd cluster's --max-txn-ops: a group moves in one transaction, so it may have at most this minus 4 members (124 with etcd's default); set it to etcd's value when you raise it there")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", c.MaxRequestBytes, "the etcd cluster's --max-request-bytes: bounds the bytes of a group's transactions; set it to etcd's value when you raise it there")
	fs.DurationVar(&c.BackgroundLatencyTarget, "background-latency-target", c.BackgroundLatencyTarget, "while calls are served and the process's run-queue wait p99 is above this, background relocations (a rebalance's, an operator's; not a drain's) start at a lower rate (0: never paced; 10us..1s)")
	fs.Float64Var(&c.BackgroundMinRate, "background-min-rate", c.BackgroundMinRate, "background relocations start at this many units per second at least, however slow the calls (a relocation is one unit and one per MiB of its state; 0.01..1e6)")
	fs.IntVar(&c.DrainConcurrency, "drain-concurrency", c.DrainConcurrency, "objects a drain (SIGTERM, meshctl drain) moves at a time, in bulk moves of up to 128 to one target each")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "how long a drain (SIGTERM, meshctl drain) may go without moving an object (one that keeps moving goes on, at most 1h): objects not moved when it ends are lost when the node stops")
	fs.IntVar(&c.OutboxMessages, "outbox-messages", c.OutboxMessages, "most messages one object's outbox holds (sent, not yet answered); a Send beyond is refused with resource_exhausted")
	fs.IntVar(&c.OutboxBytes, "outbox-bytes", c.OutboxBytes, "most bytes one object's outbox holds")
	fs.IntVar(&c.TrafficEdges, "traffic-edges", c.TrafficEdges, "edges (sender -> destination) the traffic sketch keeps, the heaviest (co-location)")
	fs.DurationVar(&c.TrafficHalfLife, "traffic-half-life", c.TrafficHalfLife, "every count of the traffic sketch halves this often")
	fs.IntVar(&c.TrafficSample, "traffic-sample", c.TrafficSample, "the traffic sketch counts one message in this many (weighted by it)")
	fs.IntVar(&c.MaxIncomingStages, "max-incoming-relocations", c.MaxIncomingStages, "relocations this node receives at a time; beyond it a PREPARE is refused with resource_exhausted")
	fs.IntVar(&c.MaxIncomingStagesPerPeer, "max-incoming-relocations-per-peer", c.MaxIncomingStagesPerPeer, "relocations this node receives at a time from one source node")
	fs.Int64Var(&c.MaxIncomingBytes, "max-incoming-relocation-bytes", c.MaxIncomingBytes, "payload bytes the relocations this node receives may announce, together")
	fs.IntVar(&c.GRPCMaxStreams, "grpc-max-streams", c.GRPCMaxStreams, "concurrent gRPC streams (calls, relocation streams) per connection")
	fs.IntVar(&c.GRPCMaxMessageBytes, "grpc-max-message-bytes", c.GRPCMaxMessageBytes, "largest gRPC message received (0: a call's limit or a STATE chunk with framing, whichever is larger)")
	fs.StringVar(&c.CRLFile, "crl-file", c.CRLFile, "the cluster CA's revocation list (meshctl certs revoke; DER or PEM): a peer or caller whose certificate it lists is refused; read again on SIGHUP")
	fs.StringVar(&c.CertFile, "cert-file", c.CertFile, "this node's certificate (role node, common name = --name); with --key-file and --trusted-ca-file the gRPC port requires mutual TLS")
	fs.StringVar(&c.KeyFile, "key-file", c.KeyFile, "the key of --cert-file")
	fs.StringVar(&c.TrustedCAFile, "trusted-ca-file", c.TrustedCAFile, "the cluster CA every peer's and client's certificate must chain to")
	fs.BoolVar(&c.Insecure, "insecure", c.Insecure, "allow plaintext gRPC on a non-loopback address (no TLS flags)")
	fs.StringVar(&c.EtcdCACert, "etcd-cacert", c.EtcdCACert, "CA of etcd's server certificate (https:// endpoints)")
	fs.StringVar(&c.EtcdCert, "etcd-cert", c.EtcdCert, "client certificate for etcd (its common name is the etcd user)")
	fs.StringVar(&c.EtcdKey, "etcd-key", c.EtcdKey, "the key of --etcd-cert")
	fs.StringVar(&c.EtcdUser, "etcd-user", c.EtcdUser, "etcd user (password authentication; with --etcd-password-file)")
	fs.StringVar(&c.EtcdPasswordFile, "etcd-password-file", c.EtcdPasswordFile, "file holding --etcd-user's password")
	c.Tracing.AddFlags(fs)
}

// EnvPrefix is the prefix of the environment mirror of every flag:
// MESHNODE_<FLAG>, e.g. MESHNODE_LEASE_TTL (cliutil.ApplyEnv applies it).
const EnvPrefix = "MESHNODE_"

// Validate checks fields and their relations.
func (c *Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
	}
	if err := keyspace.ValidateOwnerID(c.Name); err != nil {
		return bad("--name", "%v", err)
	}
	if _, err := logging.ParseLevel(c.LogLevel); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := logging.CheckFormat(c.LogFormat); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if len(c.EtcdEndpoints) == 0 {
		return bad("--etcd-endpoints", "empty")
	}
	if c.Listen == "" {
		return bad("--listen", "empty")
	}
	if c.Advertise == "" {
		c.Advertise = c.Listen
	}
	if c.AdvertiseHTTP == "" {
		c.AdvertiseHTTP = c.HTTP
	}
	if c.LeaseTTL < 2*time.Second {
		return bad("--lease-ttl", "%s is below etcd's minimum of 2s", c.LeaseTTL)
	}
	if c.LeaseMargin < 0 {
		return bad("--lease-margin", "negative")
	}
	if err := (lease.Config{TTL: c.LeaseTTL, Margin: c.LeaseMargin, OwnerID: "x"}).WithDefaults().Validate(); err != nil {
		return bad("--lease-ttl/--lease-margin", "%v", err)
	}
	if c.Weight < 0 {
		return bad("--weight", "negative")
	}
	if _, err := keyspace.New(c.Prefix, c.Cluster); err != nil {
		return bad("--prefix/--cluster", "%v", err)
	}
	if c.CallTimeout <= 0 {
		return bad("--call-timeout", "must be positive")
	}
	if c.DedupWindow < time.Second {
		return bad("--dedup-window", "%s is below 1s", c.DedupWindow)
	}
	if c.SleepAfter < 0 {
		return bad("--sleep-after", "negative (0 is never)")
	}
	if c.MaxObjects < 0 || c.MemoryLimit < 0 || c.MemoryLimit > 0 && c.MemoryLimit < 16<<20 {
		return bad("--max-objects/--memory-limit", "%d objects, %d bytes: negative, or a memory limit under 16 MiB (0 is no bound)", c.MaxObjects, c.MemoryLimit)
	}
	if c.AcquireWait == 0 {
		c.AcquireWait = c.LeaseTTL + time.Second
	}
	if c.AcquireWait < 0 {
		return bad("--acquire-wait", "negative")
	}
	if c.RelocationTimeout <= 0 || c.CutoverFallback <= 0 || c.CutoverFallback >= c.RelocationTimeout {
		return bad("--cutover-fallback", "must be positive and shorter than --relocation-timeout (%s)", c.RelocationTimeout)
	}
	if c.RelayWait <= 0 {
		return bad("--relay-wait", "must be positive")
	}
	if c.ChunkBytes < 1024 || c.ChunkBytes > 16<<20 {
		return bad("--chunk-bytes", "%d is outside [1 KiB, 16 MiB]", c.ChunkBytes)
	}
	if c.EagerCutoverBytes < 0 {
		return bad("--eager-cutover-bytes", "%d is negative", c.EagerCutoverBytes)
	}
	if c.PrecopyMinBytes < 0 {
		return bad("--precopy-min-bytes", "%d is negative", c.PrecopyMinBytes)
	}
	if c.PeerBudgetBytes < int64(c.ChunkBytes) || c.NodeBudgetBytes < c.PeerBudgetBytes {
		return bad("--peer-budget-bytes", "need chunk-bytes <= peer budget <= node budget")
	}
	if c.DurableMaxBytes < MinDurableMaxBytes || c.DurableMaxBytes > MaxDurableMaxBytes {
		return bad("--durable-max-bytes", "%d is outside [%d, %d]", c.DurableMaxBytes, MinDurableMaxBytes, MaxDurableMaxBytes)
	}
	if err := CheckStateStore(c.StateStore); err != nil {
		return bad("--state-store", "%v", err)
	}
	if err := c.Tracing.Validate(); err != nil {
		return bad("--otel-sampler", "%v", err)
	}
	if c.MaxTxnOps < 5 {
		return bad("--max-txn-ops", "%d: a group of one member needs transactions of 5 operations (etcd's default is %d)", c.MaxTxnOps, authority.DefaultMaxTxnOps)
	}
	if c.MaxRequestBytes < 64<<10 {
		return bad("--max-request-bytes", "%d is below 65536 (etcd's default is %d)", c.MaxRequestBytes, authority.DefaultMaxRequestBytes)
	}
	if err := c.Pacing().Validate(); err != nil {
		return bad("--background-latency-target/--background-min-rate", "%v", err)
	}
	if c.DrainConcurrency < 1 || c.DrainConcurrency > MaxDrainConcurrency {
		return bad("--drain-concurrency", "%d is outside [1, %d]", c.DrainConcurrency, MaxDrainConcurrency)
	}
	if c.DrainTimeout <= 0 {
		return bad("--drain-timeout", "must be positive")
	}
	if c.OutboxMessages < 1 || c.OutboxMessages > actor.MaxOutboxMessages {
		return bad("--outbox-messages", "%d is outside [1, %d]", c.OutboxMessages, actor.MaxOutboxMessages)
	}
	if c.OutboxBytes < 4<<10 || c.OutboxBytes > actor.MaxOutboxBytes {
		return bad("--outbox-bytes", "%d is outside [4096, %d]", c.OutboxBytes, actor.MaxOutboxBytes)
	}
	if c.TrafficEdges < 1 || c.TrafficEdges > traffic.MaxCapacity {
		return bad("--traffic-edges", "%d is outside [1, %d]", c.TrafficEdges, traffic.MaxCapacity)
	}
	if c.TrafficHalfLife < time.Second {
		return bad("--traffic-half-life", "%s is below 1s", c.TrafficHalfLife)
	}
	if c.TrafficSample < 1 || c.TrafficSample > 1<<16 {
		return bad("--traffic-sample", "%d is outside [1, 65536]", c.TrafficSample)
	}
	if c.MaxIncomingStages < 1 || c.MaxIncomingStagesPerPeer < 1 || c.MaxIncomingStagesPerPeer > c.MaxIncomingStages {
		return bad("--max-incoming-relocations-per-peer", "need 1 <= per peer (%d) <= --max-incoming-relocations (%d)", c.MaxIncomingStagesPerPeer, c.MaxIncomingStages)
	}
	if c.MaxIncomingBytes < int64(c.ChunkBytes) {
		return bad("--max-incoming-relocation-bytes", "%d is below --chunk-bytes (%d)", c.MaxIncomingBytes, c.ChunkBytes)
	}
	if c.GRPCMaxStreams < 16 {
		return bad("--grpc-max-streams", "%d is below 16", c.GRPCMaxStreams)
	}
	if m := c.GRPCMaxMessageBytes; m != 0 && m < c.ChunkBytes+64<<10 {
		return bad("--grpc-max-message-bytes", "%d is below --chunk-bytes + 64 KiB (%d)", m, c.ChunkBytes+64<<10)
	}
	if err := c.TLSFiles().Validate(); err != nil {
		return bad("--cert-file/--key-file/--trusted-ca-file", "%v", err)
	}
	if !c.TLSFiles().Enabled() && !c.Insecure && !mtls.Loopback(c.Listen) {
		return bad("--listen", "%s is not a loopback address: give --cert-file, --key-file and --trusted-ca-file, or --insecure to serve plaintext there", c.Listen)
	}
	if len(c.EtcdWatchEndpoints) > 0 {
		if err := c.EtcdWatch().Validate(); err != nil {
			return bad("--etcd-watch-endpoints", "%v", err)
		}
	}
	if err := c.Etcd().Validate(); err != nil {
		return bad("--etcd-*", "%v", err)
	}
	return nil
}

// Pacing is the configuration of the node's pacing of background
// relocations.
func (c Config) Pacing() admission.Config {
	return admission.Config{LatencyTarget: c.BackgroundLatencyTarget, MinRate: c.BackgroundMinRate}
}

// CheckStateStore checks a --state-store value: empty, etcd, or a
// PostgreSQL connection string (UsesPostgres).
func CheckStateStore(v string) error {
	if v == "" || v == "etcd" || UsesPostgres(v) {
		return nil
	}
	return fmt.Errorf("%q is neither etcd nor a PostgreSQL connection string (postgres://… or key=value …)", v)
}

// UsesPostgres reports whether a --state-store value names PostgreSQL.
func UsesPostgres(v string) bool {
	return strings.HasPrefix(v, "postgres://") || strings.HasPrefix(v, "postgresql://") || strings.Contains(v, "=") && !strings.Contains(v, "://")
}
