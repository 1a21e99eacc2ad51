// Package peers owns a node's connections to the other nodes: one gRPC
// connection per live owner's address (etcd's owner directory names the
// addresses; an address a message names is never dialled on its word),
// mutual TLS pinned to the owner etcd names there, and the forward stream
// a gateway's calls to one owner share (a unary call for a large request,
// or an owner without forward streams): the owner's side here, the
// gateway's in pkg/wire/transport.StreamConn, which clients use too.
package peers

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/pkg/mtls"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
	"github.com/meshloc/meshloc/pkg/wire/transport"
)

// Pool holds one client connection per peer address. It dials only
// addresses that etcd's owner directory names for a live owner (live, kept
// current by the node), and closes a connection once its address is no
// live owner's: an address from a message is never dialled on its word.
type Pool struct {
	mu    sync.Mutex
	conns map[string]*peerConn
	// live maps the dialable addresses to the owner id etcd names there;
	// nil until the first sync: nothing is dialled.
	live   map[string]string
	closed bool // close ran: no new connection (it would never be closed)
	// creds, when set, secures every connection with mutual TLS: the peer
	// must present the certificate of the owner etcd names at its address.
	creds *mtls.Reloader
	// readers: the forward streams' readers (forward.go), waited by close.
	readers sync.WaitGroup
}

type peerConn struct {
	cc    *grpc.ClientConn
	owner string                // the owner id the connection was made to reach
	fwd   *transport.StreamConn // the forward stream of the gateway's calls
}

// New is an empty pool: it dials nothing until SetLive names live owners.
func New() *Pool { return &Pool{conns: map[string]*peerConn{}} }

// Secure makes every connection dialled from now on use mutual TLS with
// creds: the peer must present the certificate of the owner etcd names at
// its address. Call it before the first connection.
func (p *Pool) Secure(creds *mtls.Reloader) {
	p.mu.Lock()
	p.creds = creds
	p.mu.Unlock()
}

// SetLive makes addrs (address → owner id) the dialable addresses and
// closes the connections to any other address, or made for another owner;
// it returns how many it closed.
func (p *Pool) SetLive(addrs map[string]string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.live = addrs
	closed := 0
	for a, c := range p.conns {
		if owner, ok := addrs[a]; !ok || owner != c.owner {
			c.close()
			delete(p.conns, a)
			closed++
		}
	}
	return closed
}

// Get is the connection to the live owner at addr, dialled on first use.
func (p *Pool) Get(addr string) (*grpc.ClientConn, error) {
	c, err := p.peer(addr)
	if err != nil {
		return nil, err
	}
	return c.cc, nil
}

func (p *Pool) peer(addr string) (*peerConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	if p.closed {
		return nil, status.Error(codes.Unavailable, "node: stopped: no new peer connection")
	}
	owner, ok := p.live[addr]
	if !ok {
		return nil, status.Errorf(codes.Unavailable, "node: %s is not the address of a live owner", addr)
	}
	opts := transport.DialOptions(grpc.MaxCallRecvMsgSize(wire.MaxMessageBytes), grpc.MaxCallSendMsgSize(relocation.MaxChunkBytes+64<<10))
	if p.creds != nil {
		opts = append(opts, grpc.WithTransportCredentials(p.creds.ClientCredentials(mtls.WantIdentity(mtls.Identity{Role: mtls.RoleNode, Name: owner}))))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	c := &peerConn{cc: cc, owner: owner, fwd: transport.NewStreamConn(cc, rpcpb.NewPeerServiceClient(cc).Forward, &p.readers)}
	p.conns[addr] = c
	return c, nil
}

// Call sends req to the owner at addr: on the connection's forward stream
// (pkg/wire/transport.StreamConn), or as a unary call when it is large or
// the owner has no forward stream.
func (p *Pool) Call(ctx context.Context, addr string, req *pb.CallRequest) (*pb.CallReply, error) {
	c, err := p.peer(addr)
	if err != nil {
		return nil, err
	}
	return c.fwd.Call(ctx, req, rpcpb.NewCallServiceClient(c.cc).Call)
}

func (c *peerConn) close() {
	c.fwd.Close()
	c.cc.Close()
}

// Close closes every connection and waits for the forward streams'
// readers; no connection is dialled after it.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	for a, c := range p.conns {
		c.close()
		delete(p.conns, a)
	}
	p.mu.Unlock()
	p.readers.Wait()
}
