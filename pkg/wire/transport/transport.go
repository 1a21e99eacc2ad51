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
// A meshnode also accepts plain "proto" (no subtype): tools like grpcurl
// work; only they go without the check.
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
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

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

func init() { encoding.RegisterCodec(Codec{}) }

// Name implements encoding.Codec.
func (Codec) Name() string { return CodecName }

// Marshal implements encoding.Codec.
func (Codec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("transport: cannot marshal %T: not a protobuf message", v)
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
	if binary.LittleEndian.Uint32(data[len(data)-4:]) != wire.CRC32C(body) {
		return ErrCorrupt
	}
	if f, ok := v.(*pb.RelocationFrame); ok && decodeChunkFrame(body, f) {
		return nil
	}
	return proto.Unmarshal(body, m)
}

// decodeChunkFrame decodes a RelocationFrame that holds a StateChunk, the
// bulk of a relocation's bytes, without copying its data: the chunk's Data
// aliases body. gRPC hands a codec a buffer of its own (Materialize), kept by
// nothing else, so the frame may keep it. It reports false, leaving f
// untouched, for anything but exactly that shape (another frame, unknown or
// repeated fields, bad wire types); proto.Unmarshal decodes those.
func decodeChunkFrame(body []byte, f *pb.RelocationFrame) bool {
	num, typ, n := protowire.ConsumeTag(body)
	if n < 0 || num != 2 || typ != protowire.BytesType {
		return false
	}
	inner, m := protowire.ConsumeBytes(body[n:])
	if m < 0 || n+m != len(body) {
		return false
	}
	c := &pb.StateChunk{}
	var seen [4]bool
	for len(inner) > 0 {
		num, typ, n := protowire.ConsumeTag(inner)
		if n < 0 || num < 1 || num > 3 || seen[num] {
			return false
		}
		seen[num] = true
		inner = inner[n:]
		switch num {
		case 1, 3:
			if typ != protowire.BytesType {
				return false
			}
			b, m := protowire.ConsumeBytes(inner)
			if m < 0 {
				return false
			}
			b = b[:len(b):len(b)]
			if num == 1 {
				c.RelocationId = b
			} else {
				c.Data = b
			}
			inner = inner[m:]
		case 2:
			if typ != protowire.VarintType {
				return false
			}
			x, m := protowire.ConsumeVarint(inner)
			if m < 0 || x > math.MaxUint32 {
				return false
			}
			c.Index = uint32(x)
			inner = inner[m:]
		}
	}
	proto.Reset(f)
	f.Frame = &pb.RelocationFrame_Chunk{Chunk: c}
	return true
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
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 2 * time.Second}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout}),
		grpc.WithInitialWindowSize(StreamWindow), grpc.WithInitialConnWindowSize(ConnWindow),
		grpc.WithReadBufferSize(IOBuffer), grpc.WithWriteBufferSize(IOBuffer),
		grpc.WithDefaultCallOptions(append([]grpc.CallOption{grpc.CallContentSubtype(CodecName)}, call...)...),
	}
}

// ServerOptions are the options of a meshnode's gRPC server: it accepts
// the clients' keep-alive pings (gRPC's default policy would answer pings
// more often than every 5 minutes with GOAWAY) and pings idle clients
// itself.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveTime / 2, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * KeepaliveTime, Timeout: KeepaliveTimeout}),
		grpc.InitialWindowSize(StreamWindow), grpc.InitialConnWindowSize(ConnWindow),
		grpc.ReadBufferSize(IOBuffer), grpc.WriteBufferSize(IOBuffer),
	}
}
