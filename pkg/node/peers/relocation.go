package peers

import (
	"context"

	"google.golang.org/grpc/metadata"

	"github.com/meshloc/meshloc/pkg/node/pacing"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
	"github.com/meshloc/meshloc/pkg/wire/transport"
)

// The relocation streams of PeerService, both ends: what the relocator's
// Peer (one relocation) and BulkPeer (a bulk move) run over.

// OpenRelocation opens the relocation stream to addr (before the seal: a
// seal is never spent dialing); a background relocation's stream carries
// its units (> 0), and whether its source waits for the target to admit it.
func (p *Pool) OpenRelocation(ctx context.Context, addr string, units float64, wait bool) (*RelocationStream, error) {
	conn, err := p.Get(addr)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	if units > 0 {
		sctx = pacing.WithBackground(sctx, units, wait)
	}
	stream, err := rpcpb.NewPeerServiceClient(conn).Relocate(sctx)
	if err != nil {
		cancel()
		return nil, err
	}
	return &RelocationStream{s: stream, cancel: cancel}, nil
}

// RelocationStream is the source's end of a relocation stream.
type RelocationStream struct {
	s      rpcpb.PeerService_RelocateClient
	cancel context.CancelFunc
}

func (p *RelocationStream) Send(f *pb.RelocationFrame) error   { return p.s.Send(f) }
func (p *RelocationStream) Recv() (*pb.RelocationFrame, error) { return p.s.Recv() }
func (p *RelocationStream) Close()                             { _ = p.s.CloseSend(); p.cancel() }

// Cancel ends the stream at once (a target that did not admit it in time).
func (p *RelocationStream) Cancel() { p.cancel() }

// Header is the target's response headers (its pacing), once it answered.
func (p *RelocationStream) Header() (metadata.MD, error) { return p.s.Header() }

// ServeRelocation is the target's end of stream: the handler's return ends it.
func ServeRelocation(stream rpcpb.PeerService_RelocateServer) *ServerStream {
	return &ServerStream{s: stream}
}

// ServerStream is the target's end of a relocation stream.
type ServerStream struct {
	s rpcpb.PeerService_RelocateServer
	// bufs: the pooled buffers of the chunks received and not yet
	// recycled; they go with the stream.
	bufs transport.Recycler
}

func (p *ServerStream) Send(f *pb.RelocationFrame) error { return p.s.Send(f) }
func (p *ServerStream) Close()                           {}

// Recv receives a frame, a large chunk into a pooled buffer.
func (p *ServerStream) Recv() (*pb.RelocationFrame, error) {
	in := transport.PooledFrame{RelocationFrame: &pb.RelocationFrame{}}
	if err := p.s.RecvMsg(&in); err != nil {
		return nil, err
	}
	p.bufs.Track(&in)
	return in.RelocationFrame, nil
}

// Recycle implements relocator.Recycler.
func (p *ServerStream) Recycle(data []byte) { p.bufs.Recycle(data) }

// OpenBulk opens a bulk stream to addr.
func (p *Pool) OpenBulk(ctx context.Context, addr string) (*BulkStream, error) {
	conn, err := p.Get(addr)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	stream, err := rpcpb.NewPeerServiceClient(conn).RelocateMany(sctx)
	if err != nil {
		cancel()
		return nil, err
	}
	return &BulkStream{s: stream, cancel: cancel}, nil
}

// BulkStream is the source's end of a bulk stream.
type BulkStream struct {
	s      rpcpb.PeerService_RelocateManyClient
	cancel context.CancelFunc
}

func (p *BulkStream) Send(fs []*pb.RelocationFrame) error {
	return p.s.Send(&pb.RelocationFrames{Frames: fs})
}

func (p *BulkStream) Recv() ([]*pb.RelocationFrame, error) {
	m, err := p.s.Recv()
	if err != nil {
		return nil, err
	}
	return m.GetFrames(), nil
}

func (p *BulkStream) Close() { _ = p.s.CloseSend(); p.cancel() }

// ServeBulk is the target's end of a bulk stream: the handler's return
// ends it.
func ServeBulk(stream rpcpb.PeerService_RelocateManyServer) *ServerBulkStream {
	return &ServerBulkStream{s: stream}
}

// ServerBulkStream is the target's end of a bulk stream.
type ServerBulkStream struct {
	s rpcpb.PeerService_RelocateManyServer
}

func (p *ServerBulkStream) Send(fs []*pb.RelocationFrame) error {
	return p.s.Send(&pb.RelocationFrames{Frames: fs})
}

func (p *ServerBulkStream) Recv() ([]*pb.RelocationFrame, error) {
	m, err := p.s.Recv()
	if err != nil {
		return nil, err
	}
	return m.GetFrames(), nil
}

func (p *ServerBulkStream) Close() {}
