// Package transport is how meshloc's processes speak gRPC to each other:
// one codec and the dial options every client of a meshnode uses.
//
// The codec ("meshloc", selected by gRPC content-subtype) is protobuf with
// a CRC32C of the encoded message appended: a message damaged on the way —
// by a broken NIC or middlebox beyond TCP's weak checksum, or by the fault
// proxy of the verification suite — fails to decode with an error instead of
// being delivered with a flipped byte in a payload, a value or a fence. The
// receiver answers or sees a transport error (codes.Internal), and callers
// retry with the same operation id, which the owner's de-duplication table
// answers: nothing is executed twice and nothing corrupted is acknowledged.
// The relocation payload also carries its own CRC32C end to end.
//
// A STATE chunk frame that carries its data's CRC32C (StateChunk.crc32c,
// computed by the source when it planned the chunks) is summed without
// reading the data, on either side: the trailer is the CRC32C of the whole
// encoded frame all the same, combined from the sums of the bytes around the
// data and that field (wire.CombineCRC32C). Damage to the data itself then
// passes the codec and is refused by the target's assembly, which checks
// every chunk against the field and the payload against PREPARE; damage to
// any other byte, the field included, fails here. A state is thus read for
// its sums once on each side instead of twice.
//
// A meshnode also accepts plain "proto" (no subtype): tools like grpcurl
// work; only they go without the check.
//
// StreamConn (callstream.go) is the caller's side of a stream of calls, on
// which a gateway's forwards to one owner, and a client's calls to one
// node, share one gRPC stream.
package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/tracing"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// CodecName is the gRPC content-subtype of the checked codec.
const CodecName = "meshloc"

// ErrCorrupt: a received message does not match its CRC32C.
var ErrCorrupt = errors.New("transport: message corrupted in transit (CRC32C mismatch)")

// Codec is protobuf followed by the little-endian CRC32C of the protobuf
// bytes.
type Codec struct{}

// gRPC uses the codec through codecV2, which hands a chunk's data to the
// transport without copying it.
func init() { encoding.RegisterCodecV2(codecV2{}) }

// Name implements encoding.Codec.
func (Codec) Name() string { return CodecName }

// Marshal implements encoding.Codec.
func (Codec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("transport: cannot marshal %T: not a protobuf message", v)
	}
	if f, ok := v.(*pb.RelocationFrame); ok {
		if hdr, data, trailer, ok := summedChunkParts(f); ok {
			return append(append(append(make([]byte, 0, len(hdr)+len(data)+len(trailer)), hdr...), data...), trailer...), nil
		}
	}
	b, err := proto.MarshalOptions{}.MarshalAppend(make([]byte, 0, proto.Size(m)+4), m)
	if err != nil {
		return nil, err
	}
	return binary.LittleEndian.AppendUint32(b, wire.CRC32C(b)), nil
}

// Unmarshal implements encoding.Codec.
func (Codec) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("transport: cannot unmarshal into %T: not a protobuf message", v)
	}
	if len(data) < 4 {
		return fmt.Errorf("%w: %d bytes", ErrCorrupt, len(data))
	}
	body := data[:len(data)-4]
	sum := binary.LittleEndian.Uint32(data[len(data)-4:])
	if f, ok := v.(*pb.RelocationFrame); ok {
		if c, off, ok := parseChunkFrame(body); ok {
			if chunkFrameSum(body, c, off) != sum {
				return ErrCorrupt
			}
			proto.Reset(f)
			f.Frame = &pb.RelocationFrame_Chunk{Chunk: c}
			return nil
		}
	}
	if sum != wire.CRC32C(body) {
		return ErrCorrupt
	}
	return proto.Unmarshal(body, m)
}

// chunkFrameSum is the CRC32C of body, a chunk frame whose data starts at
// off: combined around the data from its crc32c field when the frame has
// one (the assembly checks the data against it), read whole otherwise.
func chunkFrameSum(body []byte, c *pb.StateChunk, off int) uint32 {
	if c.Crc32C == nil {
		return wire.CRC32C(body)
	}
	end := off + len(c.Data)
	crc := wire.CombineCRC32C(wire.CRC32C(body[:off]), c.GetCrc32C(), int64(len(c.Data)))
	return wire.CombineCRC32C(crc, wire.CRC32C(body[end:]), int64(len(body)-end))
}

// summedChunkParts encodes a chunk frame that carries its data's CRC32C
// (fields 1, 2, 4, then the data last): the bytes before the data, the
// data itself (not copied) and the trailer, summing only the bytes before
// the data. It reports false for any other frame, and for a chunk with
// unknown fields; those are encoded as protobuf does.
func summedChunkParts(f *pb.RelocationFrame) (hdr, data, trailer []byte, ok bool) {
	c := f.GetChunk()
	if c == nil || c.Crc32C == nil || len(c.ProtoReflect().GetUnknown()) != 0 || len(f.ProtoReflect().GetUnknown()) != 0 {
		return nil, nil, nil, false
	}
	var buf [64]byte
	inner := protowire.AppendTag(buf[:0], 1, protowire.BytesType)
	inner = protowire.AppendBytes(inner, c.RelocationId)
	if c.Index != 0 {
		inner = protowire.AppendVarint(protowire.AppendTag(inner, 2, protowire.VarintType), uint64(c.Index))
	}
	inner = protowire.AppendFixed32(protowire.AppendTag(inner, 4, protowire.Fixed32Type), c.GetCrc32C())
	inner = protowire.AppendTag(inner, 3, protowire.BytesType)
	inner = protowire.AppendVarint(inner, uint64(len(c.Data)))
	innerLen := len(inner) + len(c.Data)
	hdr = make([]byte, 0, protowire.SizeTag(2)+protowire.SizeVarint(uint64(innerLen))+len(inner))
	hdr = protowire.AppendVarint(protowire.AppendTag(hdr, 2, protowire.BytesType), uint64(innerLen))
	hdr = append(hdr, inner...)
	crc := wire.CombineCRC32C(wire.CRC32C(hdr), c.GetCrc32C(), int64(len(c.Data)))
	return hdr, c.Data, binary.LittleEndian.AppendUint32(nil, crc), true
}

// codecV2 is Codec as gRPC's CodecV2: a summed chunk frame goes to the
// transport as its header, its data and its trailer, the data not copied
// (actor.Object's Snapshot contract: the state bytes are never modified);
// everything else as Codec encodes it. Received messages are decoded by
// Codec from gRPC's buffers made into one (the chunk data aliases it),
// a pooled one for a large frame received as a PooledFrame.
type codecV2 struct{}

func (codecV2) Name() string { return CodecName }

func (codecV2) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*pb.RelocationFrame); ok {
		if hdr, data, trailer, ok := summedChunkParts(f); ok {
			out := mem.BufferSlice{mem.SliceBuffer(hdr)}
			if len(data) > 0 {
				out = append(out, mem.SliceBuffer(data))
			}
			return append(out, mem.SliceBuffer(trailer)), nil
		}
	}
	b, err := Codec{}.Marshal(v)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (codecV2) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*PooledFrame); ok {
		return unmarshalPooled(data, f)
	}
	return Codec{}.Unmarshal(data.Materialize(), v)
}

// parseChunkFrame decodes a RelocationFrame that holds a StateChunk, the
// bulk of a relocation's bytes, without copying its data: the chunk's Data
// aliases body, from offset off. gRPC hands a codec a buffer of its own
// (Materialize), kept by nothing else, so the frame may keep it. It reports
// false for anything but exactly that shape (another frame, unknown or
// repeated fields, bad wire types); proto.Unmarshal decodes those, after
// the whole body's sum is checked.
func parseChunkFrame(body []byte) (c *pb.StateChunk, off int, ok bool) {
	num, typ, n := protowire.ConsumeTag(body)
	if n < 0 || num != 2 || typ != protowire.BytesType {
		return nil, 0, false
	}
	inner, m := protowire.ConsumeBytes(body[n:])
	if m < 0 || n+m != len(body) {
		return nil, 0, false
	}
	base := len(body) - len(inner) // inner's offset in body
	c = &pb.StateChunk{}
	var seen [5]bool
	for rest := inner; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 || num < 1 || num > 4 || seen[num] {
			return nil, 0, false
		}
		seen[num] = true
		rest = rest[n:]
		switch num {
		case 1, 3:
			if typ != protowire.BytesType {
				return nil, 0, false
			}
			b, m := protowire.ConsumeBytes(rest)
			if m < 0 {
				return nil, 0, false
			}
			b = b[:len(b):len(b)]
			if num == 1 {
				c.RelocationId = b
			} else {
				c.Data = b
				off = base + len(inner) - len(rest) + m - len(b)
			}
			rest = rest[m:]
		case 2:
			if typ != protowire.VarintType {
				return nil, 0, false
			}
			x, m := protowire.ConsumeVarint(rest)
			if m < 0 || x > math.MaxUint32 {
				return nil, 0, false
			}
			c.Index = uint32(x)
			rest = rest[m:]
		case 4:
			if typ != protowire.Fixed32Type {
				return nil, 0, false
			}
			x, m := protowire.ConsumeFixed32(rest)
			if m < 0 {
				return nil, 0, false
			}
			c.Crc32C = &x
			rest = rest[m:]
		}
	}
	return c, off, true
}

// Flow control and I/O buffers of every meshloc connection. gRPC's defaults
// (a 64 KiB window grown by BDP estimation, 32 KiB buffers) suit small
// calls; a STATE stream of megabytes (chunks up to 16 MiB) waits for window
// updates on them. The relocation budgets (--peer-budget-bytes,
// --node-budget-bytes) bound what is in flight.
const (
	StreamWindow = 32 << 20
	ConnWindow   = 32 << 20
	IOBuffer     = 256 << 10
)

// ReconnectMaxDelay bounds gRPC's reconnect backoff (its default grows to
// 2 minutes: a node restarted after a crash would stay unreachable from a
// client that failed to reach it a few times).
const ReconnectMaxDelay = time.Second

// Keep-alive: a client with calls in flight pings after KeepaliveTime of
// silence and closes the connection when no answer comes within
// KeepaliveTimeout, so a call on a connection that hangs (a peer gone
// without a FIN, a partition, a stream desynchronised by damaged bytes)
// fails with Unavailable instead of waiting for its whole deadline.
const (
	KeepaliveTime    = 5 * time.Second
	KeepaliveTimeout = 3 * time.Second
)

// DialOptions are the options of every client connection to a meshnode:
// the checked codec, no TLS (meshloc runs on a trusted network), a
// reconnect backoff bounded by ReconnectMaxDelay, keep-alive pings while
// calls are in flight; extra call options are added to the codec's.
func DialOptions(call ...grpc.CallOption) []grpc.DialOption {
	bo := backoff.DefaultConfig
	bo.BaseDelay = 50 * time.Millisecond
	bo.MaxDelay = ReconnectMaxDelay
	return append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 2 * time.Second}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout}),
		grpc.WithInitialWindowSize(StreamWindow), grpc.WithInitialConnWindowSize(ConnWindow),
		grpc.WithReadBufferSize(IOBuffer), grpc.WithWriteBufferSize(IOBuffer),
		grpc.WithDefaultCallOptions(append([]grpc.CallOption{grpc.CallContentSubtype(CodecName)}, call...)...),
	}, tracing.DialOptions()...) // admin requests and relocation streams carry trace context
}

// ServerOptions are the options of a meshnode's gRPC server: it accepts
// the clients' keep-alive pings (gRPC's default policy would answer pings
// more often than every 5 minutes with GOAWAY) and pings idle clients
// itself.
func ServerOptions() []grpc.ServerOption {
	return append([]grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveTime / 2, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * KeepaliveTime, Timeout: KeepaliveTimeout}),
		grpc.InitialWindowSize(StreamWindow), grpc.InitialConnWindowSize(ConnWindow),
		grpc.ReadBufferSize(IOBuffer), grpc.WriteBufferSize(IOBuffer),
	}, tracing.ServerOptions()...)
}
