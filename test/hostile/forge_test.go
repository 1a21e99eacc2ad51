package hostile_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/internal/chaos"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/mtls"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// dial is a plain gRPC connection to a node, as anyone on the network can
// open one; closed when the test ends.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// dialAs is a gRPC connection to a node of c presenting the certificate of
// name (a node, admin, operator, viewer; "" or a plaintext cluster: none).
func dialAs(t *testing.T, c *chaos.Cluster, addr, name string) *grpc.ClientConn {
	t.Helper()
	if !c.Secured() || name == "" {
		return dial(t, addr)
	}
	r, err := mtls.Load(c.Files(name))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(r.ClientCredentials(mtls.WantRole(mtls.RoleNode))),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// forgery is a relocation nobody started, built from what the API
// publishes: the records (with their store versions), the owners' pairs,
// routing ids and addresses.
type forgery struct {
	id     wire.RelocationID
	nonce  []byte
	source pubOwner // the owner the PREPARE claims to come from
	target pubOwner
	// objects: the primary first (a group's record, then its members).
	objects []pubObject
	// selfIntent: the attacker writes, into the records it sends, an
	// intent of its own making (naming the target, its nonce's hash)
	// instead of the records as etcd holds them. Such a PREPARE is
	// consistent in itself; only etcd can tell.
	selfIntent bool
	// states: each actor participant's state (nil: none).
	states map[string][]byte
	// queued: requests in the payload (the attacker picks their requester).
	queued   []*pb.CallRequest
	deadline time.Time
	chunk    int
	// announce, when set, is the payload length PREPARE announces (and its
	// chunk count follows), whatever is sent.
	announce uint64
	// claim, when set with selfIntent, is the owner the forged records and
	// PREPARE's coordinator name instead of source.
	claim *pubOwner
}

func newForgery(t *testing.T, c *chaos.Cluster, source, target string, names ...string) *forgery {
	t.Helper()
	os := owners(t, c)
	f := &forgery{id: wire.NewRelocationID(), nonce: make([]byte, wire.NonceLen), source: os[source], target: os[target],
		states: map[string][]byte{}, deadline: time.Now().Add(8 * time.Second), chunk: 1 << 20}
	_, _ = rand.Read(f.nonce)
	for _, n := range names {
		f.objects = append(f.objects, object(t, c, n))
	}
	return f
}

func hexID(t *testing.T, s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 16 {
		t.Fatalf("routing id %q: %v", s, err)
	}
	return b
}

// records are the participant records the PREPARE carries.
func (f *forgery) records(t *testing.T) [][]byte {
	var out [][]byte
	for _, o := range f.objects {
		if !f.selfIntent {
			out = append(out, o.Record)
			continue
		}
		r, err := record.DecodeRecord(o.Record)
		if err != nil {
			t.Fatal(err)
		}
		if f.claim != nil {
			r.Owner = record.OwnerRef{ID: f.claim.ID, Generation: f.claim.Generation}
			r.Node = record.NodeRef{RoutingID: f.claim.RoutingID, Address: f.claim.Address}
		}
		r.State = record.StateRelocating
		r.Intent = &record.Intent{RelocationID: f.id.String(),
			Target:     record.OwnerRef{ID: f.target.ID, Generation: f.target.Generation},
			TargetNode: record.NodeRef{RoutingID: f.target.RoutingID, Address: f.target.Address},
			DeadlineMs: f.deadline.UnixMilli(), NonceHash: record.HashNonce(f.nonce)}
		out = append(out, r.Encode())
	}
	return out
}

// payload is the envelope of the forged state.
func (f *forgery) payload(t *testing.T) [][]byte {
	t.Helper()
	var pss []*pb.ParticipantState
	var states [][]byte
	queued := false
	for _, o := range f.objects {
		r, err := record.DecodeRecord(o.Record)
		if err != nil {
			t.Fatal(err)
		}
		st := f.states[o.Object]
		ps := &pb.ParticipantState{Participant: &pb.Participant{Object: o.Object, Type: r.Type, ObjectGeneration: r.ObjectGeneration,
			AuthorityGeneration: r.AuthorityGeneration, StoreVersion: o.StoreVersion}, StateLength: uint64(len(st))}
		if r.Kind == "actor" {
			ps.Replies = actor.NewReplyTable(time.Minute, 0).Encode()
			if !queued { // the first actor carries the queued requests
				ps.Queued, queued = f.queued, true
			}
		}
		pss = append(pss, ps)
		states = append(states, st)
	}
	segs, err := relocation.EncodeEnvelope(f.id, pss, states)
	if err != nil {
		t.Fatal(err)
	}
	return segs
}

// prepare is the forged PREPARE and the chunks of its payload.
func (f *forgery) prepare(t *testing.T) (*pb.Prepare, []*pb.StateChunk) {
	t.Helper()
	segs := f.payload(t)
	var all []byte
	for _, s := range segs {
		all = append(all, s...)
	}
	m := relocation.PlanChunks(all, f.chunk)
	var chunks []*pb.StateChunk
	for i := range m.Chunks {
		s, e := m.ChunkSpan(i)
		chunks = append(chunks, &pb.StateChunk{RelocationId: f.id[:], Index: i, Data: all[s:e], Crc32C: proto.Uint32(m.ChunkCRCs[i])})
	}
	if f.announce > 0 {
		m = relocation.Manifest{Length: f.announce, Chunks: uint32((f.announce + uint64(f.chunk) - 1) / uint64(f.chunk)), CRC32C: 1}
	}
	recs := f.records(t)
	src := f.source
	if f.claim != nil {
		src = *f.claim
	}
	p := &pb.Prepare{Version: wire.Version, RelocationId: f.id[:], Nonce: f.nonce,
		Coordinator: &pb.Fence{OwnerId: src.ID, OwnerGeneration: src.Generation, RoutingId: hexID(t, src.RoutingID),
			StoreVersion: f.objects[0].StoreVersion},
		Target:        &pb.Fence{OwnerId: f.target.ID, OwnerGeneration: f.target.Generation, RoutingId: hexID(t, f.target.RoutingID)},
		PayloadLength: m.Length, ChunkCount: m.Chunks, Crc32C: m.CRC32C, ApplicationVersion: "1",
		DeadlineUnixMs: f.deadline.UnixMilli(),
	}
	for i, o := range f.objects {
		r, _ := record.DecodeRecord(o.Record)
		p.Participants = append(p.Participants, &pb.Participant{Object: o.Object, Type: r.Type, ObjectGeneration: r.ObjectGeneration,
			AuthorityGeneration: r.AuthorityGeneration, StoreVersion: o.StoreVersion, Record: recs[i]})
		if i == 0 {
			p.Coordinator.ObjectGeneration, p.Coordinator.AuthorityGeneration = r.ObjectGeneration, r.AuthorityGeneration
		}
	}
	return p, chunks
}

// stream is one relocation stream the attacker opened to a node; one
// goroutine receives its frames (until the stream ends) into frames.
type stream struct {
	s      rpcpb.PeerService_RelocateClient
	cancel context.CancelFunc
	frames chan *pb.RelocationFrame // closed when the stream ended
}

func openStream(t *testing.T, cc *grpc.ClientConn) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := rpcpb.NewPeerServiceClient(cc).Relocate(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	st := &stream{s: s, cancel: cancel, frames: make(chan *pb.RelocationFrame, 64)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(st.frames)
		for {
			f, err := s.Recv()
			if err != nil {
				return
			}
			st.frames <- f
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return st
}

func (s *stream) send(t *testing.T, f *pb.RelocationFrame) {
	t.Helper()
	if err := s.s.Send(f); err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("send %T: %v", f.GetFrame(), err) // the node may have ended the stream: its answer comes by Recv
	}
}

func prepareFrame(p *pb.Prepare) *pb.RelocationFrame {
	return &pb.RelocationFrame{Frame: &pb.RelocationFrame_Prepare{Prepare: p}}
}

func chunkFrame(c *pb.StateChunk) *pb.RelocationFrame {
	return &pb.RelocationFrame{Frame: &pb.RelocationFrame_Chunk{Chunk: c}}
}

// recv waits up to d for the node's next frame (nil: the stream ended or
// nothing came).
func (s *stream) recv(d time.Duration) *pb.RelocationFrame {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case f := <-s.frames:
		return f
	case <-t.C:
		return nil
	}
}

// failedCode is the code of a FAILED frame (unspecified for anything else).
func failedCode(f *pb.RelocationFrame) pb.Code {
	if fl := f.GetFailed(); fl != nil {
		return fl.GetCode()
	}
	return pb.Code_CODE_UNSPECIFIED
}

// run sends the whole forged relocation: PREPARE, every chunk, and, once
// READY came, the DATA frames then CUTOVER; it returns every frame the node
// answered with until it ended the stream.
func (f *forgery) run(t *testing.T, cc *grpc.ClientConn, data []*pb.CallRequest) []*pb.RelocationFrame {
	t.Helper()
	p, chunks := f.prepare(t)
	s := openStream(t, cc)
	s.send(t, prepareFrame(p))
	for _, ch := range chunks {
		s.send(t, chunkFrame(ch))
	}
	var got []*pb.RelocationFrame
	for {
		fr := s.recv(15 * time.Second)
		if fr == nil {
			return got
		}
		got = append(got, fr)
		if fr.GetReady() != nil {
			var crc uint32
			for i, q := range data {
				crc = wire.UpdateCRC32C(crc, relocation.RequestBytes(q))
				s.send(t, &pb.RelocationFrame{Frame: &pb.RelocationFrame_Data{Data: &pb.Data{RelocationId: f.id[:], Sequence: uint32(i), Request: q}}})
			}
			s.send(t, &pb.RelocationFrame{Frame: &pb.RelocationFrame_Cutover{Cutover: &pb.Cutover{RelocationId: f.id[:], DataCount: uint32(len(data)), DataCrc32C: crc}}})
		}
	}
}
