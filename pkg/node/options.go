package node

import (
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/clock"
	"github.com/meshloc/meshloc/pkg/statestore"
)

// Option configures a Node at New.
type Option func(*options)

// options are what an embedder injects (the Config is what an operator
// sets).
type options struct {
	Registry *actor.Registry
	Logger   zerolog.Logger
	Etcd     *clientv3.Client
	Listener net.Listener
	Metrics  *prometheus.Registry
	Clock    clock.Clock
	State    statestore.Opener
	onReady  func()
	onLost   func(object string)
}

// WithRegistry sets the object types the node may host (required): the
// embedder's own, registered with actor.Registry.Register, and any of
// pkg/actor/builtin. Config.Types narrows which of them this node hosts;
// empty hosts them all.
func WithRegistry(r *actor.Registry) Option { return func(o *options) { o.Registry = r } }

// WithLogger sets the node's logger (default: none).
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.Logger = l } }

// WithEtcd gives the node an etcd client to use instead of dialing
// Config.EtcdEndpoints; the node does not close it.
func WithEtcd(c *clientv3.Client) Option { return func(o *options) { o.Etcd = c } }

// WithListener gives the node a listener to serve gRPC on instead of
// listening on Config.Listen (the node closes it at Stop).
func WithListener(l net.Listener) Option { return func(o *options) { o.Listener = l } }

// WithMetrics registers the node's metrics on r (the embedder serves
// them) instead of a registry of its own served on Config.HTTP.
func WithMetrics(r *prometheus.Registry) Option { return func(o *options) { o.Metrics = r } }

// WithStateStore keeps durable objects' state in the store open makes
// (statestore/postgres.Opener) instead of beside the records in etcd. The
// node opens it at Start and closes it at Stop.
func WithStateStore(open statestore.Opener) Option { return func(o *options) { o.State = open } }

// WithClock sets the node's one clock: its own, its relocations' and its
// lease keeper's (default: the process clock). For tests.
func WithClock(c clock.Clock) Option { return func(o *options) { o.Clock = c } }

// OnReady calls f once, when Start has the node serving (its owner key
// advertises it, its caches are loaded), before Start returns.
func OnReady(f func()) Option { return func(o *options) { o.onReady = f } }

// OnOwnershipLost calls f, on a goroutine of the node's, when etcd names
// another owner (or no record) for an object hosted here: the node has
// stopped serving it and dropped its state (a memory object's state is
// lost; a durable object's is in etcd). It happens after a network
// partition or a pause longer than the lease, never in a clean run.
func OnOwnershipLost(f func(object string)) Option { return func(o *options) { o.onLost = f } }
