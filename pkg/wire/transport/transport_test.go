package transport

import (
	"encoding/binary"
	"errors"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

func TestCodecRoundTripAndCorruption(t *testing.T) {
	in := &pb.CallRequest{Object: "actor/list/l1", Method: "append", Args: [][]byte{[]byte("c1-42")}, OperationId: make([]byte, 16)}
	b, err := Codec{}.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out pb.CallRequest
	if err := (Codec{}).Unmarshal(b, &out); err != nil || !proto.Equal(in, &out) {
		t.Fatalf("round trip: %v %v", err, &out)
	}
	// Every single-byte flip is refused, never decoded into another value.
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x01
		var x pb.CallRequest
		if err := (Codec{}).Unmarshal(c, &x); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flip at byte %d of %d: %v (decoded %v)", i, len(b), err, &x)
		}
	}
	for _, short := range [][]byte{nil, {1}, {1, 2, 3}} {
		if err := (Codec{}).Unmarshal(short, &out); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%d bytes: %v", len(short), err)
		}
	}
	if _, err := (Codec{}).Marshal("not a message"); err == nil {
		t.Error("marshal of a non-message")
	}
}

func BenchmarkCodec(b *testing.B) {
	m := &pb.CallReply{Payload: make([]byte, 256)}
	b.ReportAllocs()
	for b.Loop() {
		buf, _ := Codec{}.Marshal(m)
		var out pb.CallReply
		_ = Codec{}.Unmarshal(buf, &out)
	}
}

// The chunk fast path decodes exactly what proto.Unmarshal decodes, for
// chunk frames and everything else, and its Data aliases the input.
func TestChunkFrameFastPath(t *testing.T) {
	id := []byte("0123456789abcdef")
	frames := []*pb.RelocationFrame{
		{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{RelocationId: id, Index: 7, Data: []byte("state bytes")}}},
		{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{RelocationId: id, Index: 0, Data: nil}}},
		{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{Index: 1<<32 - 1, Data: make([]byte, 1<<20)}}},
		{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{}}},
		{Frame: &pb.RelocationFrame_Ready{Ready: &pb.Ready{RelocationId: id}}},
		{Frame: &pb.RelocationFrame_Prepare{Prepare: &pb.Prepare{RelocationId: id, ChunkCount: 3}}},
		{},
	}
	for i, in := range frames {
		b, err := Codec{}.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var out pb.RelocationFrame
		if err := (Codec{}).Unmarshal(b, &out); err != nil || !proto.Equal(in, &out) {
			t.Fatalf("frame %d: %v: %v != %v", i, err, &out, in)
		}
		if d := out.GetChunk().GetData(); len(d) > 0 && &d[0] != &b[len(b)-4-len(d)] {
			t.Errorf("frame %d: chunk data was copied, not aliased", i)
		}
	}
	// Shapes the fast path leaves to proto.Unmarshal (or refuses): the
	// result is proto.Unmarshal's either way.
	chunk := func(fields ...[]byte) []byte {
		var inner []byte
		for _, f := range fields {
			inner = append(inner, f...)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), inner)
	}
	bytesField := func(n protowire.Number, v string) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, n, protowire.BytesType), []byte(v))
	}
	varintField := func(n protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, n, protowire.VarintType), v)
	}
	for i, body := range [][]byte{
		chunk(bytesField(3, "d"), varintField(2, 5), bytesField(1, "id")), // any order
		chunk(bytesField(3, "a"), bytesField(3, "b")),                     // repeated: the last wins
		chunk(bytesField(9, "unknown"), bytesField(3, "d")),               // unknown field
		chunk(varintField(2, 1<<33)),                                      // index over 32 bits
		append(chunk(bytesField(3, "d")), varintField(99, 1)...),          // a field after the chunk
		append(chunk(bytesField(3, "a")), chunk(bytesField(1, "b"))...),   // two chunk fields: merged
		chunk(varintField(3, 1)),                                          // data with a wrong wire type
		{0x12, 0x05, 0x1a},                                                // truncated
	} {
		var want, got pb.RelocationFrame
		werr := proto.Unmarshal(body, &want)
		gerr := (Codec{}).Unmarshal(binary.LittleEndian.AppendUint32(append([]byte(nil), body...), wire.CRC32C(body)), &got)
		if (werr == nil) != (gerr == nil) || (werr == nil && !proto.Equal(&want, &got)) {
			t.Errorf("shape %d: fast path %v (%v), proto.Unmarshal %v (%v)", i, &got, gerr, &want, werr)
		}
	}
}

func BenchmarkCodecChunk1MiB(b *testing.B) {
	m := &pb.RelocationFrame{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{RelocationId: make([]byte, 16), Index: 3, Data: make([]byte, 1<<20)}}}
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ := Codec{}.Marshal(m)
		var out pb.RelocationFrame
		_ = Codec{}.Unmarshal(buf, &out)
	}
}
