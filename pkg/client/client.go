// Package client is the Go client of meshloc: it calls objects by name.
//
// With etcd endpoints it routes each call straight to the object's owner
// from a location cache fed by an etcd watch (one hop), and sends calls for
// objects without a live owner to a serving node, which places them. With a
// node list it sends every call to one of those nodes as a gateway.
//
// Every call carries an operation id (a UUIDv7). The client retries a call
// whose outcome is retryable (NotOwner, Relocating, Unavailable) with the
// same id, so the owner's de-duplication table makes the retry safe: it is
// executed at most once and the retry gets the first reply. A call whose
// deadline passes is of unknown outcome: retry it with CallOp and the same id.
//
// The client remembers the newest fence it has seen per object and refuses a
// reply carrying an older one (CODE_STALE_FENCE); a re-created object is
// reported as CODE_STATE_LOST, never as a silent reset.
package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/mtls"
	"github.com/meshloc/meshloc/pkg/tracing"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
	"github.com/meshloc/meshloc/pkg/wire/transport"
)

// ErrNoNodes: neither etcd endpoints, nor nodes, nor locationd were given;
// or a call on a client with none of the first two, or no node serves.
var ErrNoNodes = errors.New("client: no node to call")

// ErrTLSFiles: the client's certificate files (Config.TLS, EtcdTLS) do
// not make a configuration: one missing or unreadable, or a certificate
// that does not chain to the CA given. Nothing was sent.
var ErrTLSFiles = errors.New("client: TLS files")

// ErrClosed: a call on a client after Close.
var ErrClosed = errors.New("client: closed")

// Config of a Client.
type Config struct {
	// EtcdEndpoints: route from etcd (direct to owners).
	EtcdEndpoints []string
	// Etcd: an existing etcd client to route from (not closed by Close).
	Etcd *clientv3.Client
	// EtcdWatchEndpoints: a watch fan-out (`locationd watch-proxy`) the
	// client's location cache and owner directory follow etcd through,
	// reached with EtcdTLS's files (not its password); reads stay on etcd.
	EtcdWatchEndpoints []string
	// Nodes: gateway addresses, used when no etcd is given.
	Nodes []string
	// Prefix and Cluster of the etcd layout (defaults /meshloc, default).
	Prefix, Cluster string
	// Timeout bounds one call with its retries (default 10 s).
	Timeout time.Duration
	// TLS is the caller's certificate, key and the cluster CA (pkg/mtls):
	// set, every node is reached with mutual TLS and must present a node
	// certificate of that CA.
	TLS mtls.Files
	// EtcdTLS is how to reach a secured etcd (its CA; a client certificate,
	// or a user and a password file); its Endpoints are EtcdEndpoints.
	EtcdTLS mtls.Etcd
	// Locationd is locationd's API URL (http://127.0.0.1:7070, https with
	// TLS): relocations, drains, listings, groups, the rebalancer (ops.go).
	// A client with only Locationd operates the cluster but calls nothing.
	Locationd string
	// HTTPClient reaches Locationd (default: one with TLS's identity, or
	// http.DefaultClient).
	HTTPClient *http.Client
}

// Reply is the answer of a successful call.
type Reply struct {
	Payload []byte
	// Fence the reply was served under.
	Fence authority.Fence
	// StoreVersion of the record the fence comes from.
	StoreVersion int64
	// Replayed: answered from the de-duplication table.
	Replayed bool
	// Node that served it.
	Node string
}

// Client calls objects. It is safe for concurrent use.
type Client struct {
	cfg     Config
	keys    keyspace.Keys
	admin   *Admin          // nil without Config.Locationd
	bg      context.Context // ends at Close
	etcd    *clientv3.Client
	ownEtcd bool
	watch   *clientv3.Client // the fan-out's client (EtcdWatchEndpoints), or nil
	cache   *authority.Cache
	dir     *lease.Directory
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	tls    *mtls.Reloader // nil: plaintext
	mu     sync.Mutex
	conns  map[string]*nodeConn
	fences map[string]authority.Fence
	closed bool // Close ran: no new connection (it would never be closed)
	// readers: the call streams' readers, waited by Close.
	readers sync.WaitGroup
}

// nodeConn is the client's connection to one node, and the stream its
// calls there share (CallService.CallStream; a large call, or a node
// without it, goes unary).
type nodeConn struct {
	cc    *grpc.ClientConn
	calls *transport.StreamConn
}

// New returns a client; with etcd it waits until its caches are loaded.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Prefix == "" {
		cfg.Prefix = keyspace.DefaultPrefix
	}
	if cfg.Cluster == "" {
		cfg.Cluster = keyspace.DefaultCluster
	}
	keys, err := keyspace.New(cfg.Prefix, cfg.Cluster)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, keys: keys, conns: map[string]*nodeConn{}, fences: map[string]authority.Fence{}}
	if cfg.TLS.Enabled() {
		if c.tls, err = mtls.Load(cfg.TLS); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrTLSFiles, err)
		}
	}
	if cfg.Locationd != "" {
		if c.admin, err = newAdmin(cfg, c.tls); err != nil {
			return nil, err
		}
	}
	c.etcd = cfg.Etcd
	if c.etcd == nil && len(cfg.EtcdEndpoints) > 0 {
		e := cfg.EtcdTLS
		e.Endpoints = cfg.EtcdEndpoints
		ecfg, err := e.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("%w: etcd: %w", ErrTLSFiles, err)
		}
		if c.etcd, err = clientv3.New(ecfg); err != nil {
			return nil, fmt.Errorf("client: etcd: %w", err)
		}
		c.ownEtcd = true
	}
	bg, cancel := context.WithCancel(context.Background())
	c.bg, c.cancel = bg, cancel
	if c.etcd == nil {
		if len(cfg.Nodes) == 0 && c.admin == nil {
			cancel()
			return nil, ErrNoNodes
		}
		return c, nil
	}
	var cacheOpts []authority.CacheOption
	var dirOpts []lease.DirectoryOption
	if len(cfg.EtcdWatchEndpoints) > 0 {
		e := mtls.Etcd{Endpoints: cfg.EtcdWatchEndpoints, CACert: cfg.EtcdTLS.CACert, Cert: cfg.EtcdTLS.Cert, Key: cfg.EtcdTLS.Key}
		wcfg, err := e.ClientConfig()
		if err == nil {
			c.watch, err = clientv3.New(wcfg)
		}
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("client: etcd watch: %w", err)
		}
		cacheOpts = append(cacheOpts, authority.WatchVia(c.watch))
		dirOpts = append(dirOpts, lease.WatchVia(c.watch))
	}
	c.cache = authority.NewCache(c.etcd, keys, cacheOpts...)
	c.dir = lease.NewDirectory(c.etcd, keys, dirOpts...)
	c.wg.Add(2)
	go func() { defer c.wg.Done(); _ = c.cache.Run(bg) }()
	go func() { defer c.wg.Done(); _ = c.dir.Run(bg) }()
	for _, ch := range []<-chan struct{}{c.cache.Ready(), c.dir.Ready()} {
		select {
		case <-ch:
		case <-ctx.Done():
			c.Close()
			return nil, ctx.Err()
		}
	}
	return c, nil
}

// Close releases connections and stops the caches.
func (c *Client) Close() error {
	if c.cancel != nil {
		c.cancel()
	}
	c.wg.Wait()
	c.mu.Lock()
	c.closed = true
	for a, nc := range c.conns {
		nc.calls.Close()
		nc.cc.Close()
		delete(c.conns, a)
	}
	c.mu.Unlock()
	c.readers.Wait()
	var errs []error
	if c.watch != nil {
		errs = append(errs, c.watch.Close())
	}
	if c.ownEtcd {
		errs = append(errs, c.etcd.Close())
	}
	return errors.Join(errs...)
}

// Call calls method on object with string arguments and a new operation id.
func (c *Client) Call(ctx context.Context, object, method string, args ...string) (*Reply, error) {
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	return c.CallBytes(ctx, wire.NewOperationID(), object, method, b)
}

// CallID is Call with a given operation id: a call retried with the same id
// never runs twice (keep the id of a call whose outcome is unknown).
func (c *Client) CallID(ctx context.Context, op wire.OperationID, object, method string, args ...string) (*Reply, error) {
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	return c.CallBytes(ctx, op, object, method, b)
}

// CallOp is CallBytes.
//
// Deprecated: CallOp took bytes where Call takes strings; use CallID (an
// operation id, string arguments) or CallBytes (arguments as bytes).
func (c *Client) CallOp(ctx context.Context, op wire.OperationID, object, method string, args [][]byte) (*Reply, error) {
	return c.CallBytes(ctx, op, object, method, args)
}

// CallBytes calls with a given operation id and arguments as bytes: a call
// retried with the same id never runs twice.
func (c *Client) CallBytes(ctx context.Context, op wire.OperationID, object, method string, args [][]byte) (*Reply, error) {
	if tracing.On() {
		return c.tracedCall(ctx, op, object, method, args) // trace.go
	}
	return c.callBytes(ctx, op, object, method, args, "")
}

// callBytes is CallBytes, its requests carrying traceparent.
func (c *Client) callBytes(ctx context.Context, op wire.OperationID, object, method string, args [][]byte, traceparent string) (*Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req := &pb.CallRequest{Version: wire.Version, Object: object, Method: method, Args: args, OperationId: op[:], Traceparent: traceparent}
	var hint string
	backoff := 5 * time.Millisecond
	var last error
	var refused map[string]error // gateways whose connection never carried the call
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				if last == nil {
					last = ctx.Err()
				}
				return nil, fmt.Errorf("%w (last: %w)", &wire.Error{Code: pb.Code_CODE_DEADLINE_EXCEEDED, Message: "call deadline passed"}, last)
			}
			backoff = min(backoff*2, 300*time.Millisecond)
		}
		req.KnownObjectGeneration = c.known(object)
		addr, direct := hint, hint != ""
		if addr == "" {
			addr, direct = c.route(object)
		}
		hint = ""
		if addr == "" {
			last = ErrNoNodes
			continue
		}
		req.Direct = direct
		conn, err := c.nodeConn(addr)
		if errors.Is(err, ErrClosed) {
			return nil, err
		}
		if err != nil {
			last = err
			continue
		}
		rep, err := conn.calls.Call(ctx, req, rpcpb.NewCallServiceClient(conn.cc).Call)
		if err != nil {
			if p := dialProblem(addr, err, c.tls != nil); p != nil {
				if errors.Is(p, ErrTLSMismatch) {
					return nil, p // a configuration's error: no retry mends it
				}
				if refused == nil {
					refused = map[string]error{}
				}
				if refused[addr] = p; c.refusedAll(refused) {
					return nil, c.joinRefused(refused)
				}
			}
			last = fmt.Errorf("call %s via %s: %w", object, addr, err)
			c.forget(object)
			continue
		}
		if f := rep.GetFence(); f != nil && !c.accept(object, f) {
			// A superseded owner answered: its state is abandoned; ask the
			// current owner (same operation id).
			last = &wire.Error{Code: pb.Code_CODE_STALE_FENCE, Message: "refused a reply from " + f.GetOwnerId() + " older than a fence already seen"}
			c.forget(object)
			continue
		}
		switch rep.GetCode() {
		case pb.Code_CODE_OK:
			return &Reply{Payload: rep.GetPayload(), Fence: fenceOf(rep.GetFence()), StoreVersion: rep.GetFence().GetStoreVersion(),
				Replayed: rep.GetReplayed(), Node: rep.GetFence().GetOwnerId()}, nil
		case pb.Code_CODE_NOT_OWNER, pb.Code_CODE_RELOCATING:
			if h := rep.GetHint(); h != nil && h.GetAddress() != "" && c.dir != nil && c.dir.Alive(h.GetFence().GetOwnerId(), h.GetFence().GetOwnerGeneration()) {
				hint = h.GetAddress()
				backoff = time.Millisecond
			}
		}
		werr := &wire.Error{Code: rep.GetCode(), Message: rep.GetMessage(), Hint: rep.GetHint()}
		if !wire.RetryReply(rep) {
			return nil, werr
		}
		last = werr
	}
}

func fenceOf(f *pb.Fence) authority.Fence {
	return authority.Fence{Owner: authority.OwnerRef{ID: f.GetOwnerId(), Generation: f.GetOwnerGeneration()},
		ObjectGeneration: f.GetObjectGeneration(), AuthorityGeneration: f.GetAuthorityGeneration()}
}

func (c *Client) known(object string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fences[object].ObjectGeneration
}

// Fence is the newest fence seen for object.
func (c *Client) Fence(object string) (authority.Fence, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.fences[object]
	return f, ok
}

// accept records the fence of a reply unless it is older than the newest
// seen for object (a superseded owner answered): then it refuses it
// (acceptOlderFence says otherwise only in a test build with the planted bug
// no-generation-check: planted_on.go).
func (c *Client) accept(object string, wf *pb.Fence) bool {
	f := fenceOf(wf)
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.fences[object]; ok && cur.Newer(f) {
		return acceptOlderFence()
	}
	c.fences[object] = f
	return true
}

func (c *Client) forget(object string) {
	if c.cache == nil {
		return
	}
	if obj, err := keyspace.ParseObject(object); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if snap, err := authority.New(c.etcd, c.cache.Keys()).Read(ctx, obj); err == nil {
			c.cache.Observe(snap)
		}
	}
}

// route returns the owner's address (direct) when known and alive, otherwise
// a gateway.
func (c *Client) route(object string) (string, bool) {
	if c.cache == nil {
		return c.cfg.Nodes[rand.IntN(len(c.cfg.Nodes))], false
	}
	if loc, ok := c.cache.LookupName(object); ok && c.dir.Alive(loc.Owner.ID, loc.Owner.Generation) {
		return loc.Node.Address, true
	}
	var serving []string
	for _, o := range c.dir.List() {
		if o.Descriptor.State == lease.StateServing && o.Descriptor.Address != "" {
			serving = append(serving, o.Descriptor.Address)
		}
	}
	if len(serving) == 0 {
		return "", false
	}
	return serving[rand.IntN(len(serving))], false
}

func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	nc, err := c.nodeConn(addr)
	if err != nil {
		return nil, err
	}
	return nc.cc, nil
}

func (c *Client) nodeConn(addr string) (*nodeConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if nc, ok := c.conns[addr]; ok {
		return nc, nil
	}
	if c.closed {
		return nil, ErrClosed
	}
	opts := transport.DialOptions(grpc.MaxCallRecvMsgSize(wire.MaxMessageBytes), grpc.MaxCallSendMsgSize(wire.MaxMessageBytes))
	if c.tls != nil {
		opts = append(opts, grpc.WithTransportCredentials(c.tls.ClientCredentials(mtls.WantRole(mtls.RoleNode))))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	nc := &nodeConn{cc: cc, calls: transport.NewStreamConn(cc, rpcpb.NewCallServiceClient(cc).CallStream, &c.readers)}
	c.conns[addr] = nc
	return nc, nil
}
