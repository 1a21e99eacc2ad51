package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
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

// A chunk frame that carries its data's CRC32C is encoded and checked
// without reading the data, in the same format: protobuf, then the CRC32C
// of all of it. Damage to any byte but the data's fails in the codec;
// damage to the data passes it and no longer matches the frame's crc32c,
// which the target's assembly checks.
func TestSummedChunkFrame(t *testing.T) {
	data := make([]byte, 3000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for _, in := range []*pb.RelocationFrame{
		{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{RelocationId: []byte("0123456789abcdef"), Index: 300, Data: data, Crc32C: proto.Uint32(wire.CRC32C(data))}}},
		{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{RelocationId: []byte("id"), Data: nil, Crc32C: proto.Uint32(0)}}},
	} {
		b, err := Codec{}.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		body := b[:len(b)-4]
		if binary.LittleEndian.Uint32(b[len(b)-4:]) != wire.CRC32C(body) {
			t.Fatal("the trailer is not the CRC32C of the encoded frame")
		}
		var std pb.RelocationFrame
		if err := proto.Unmarshal(body, &std); err != nil || !proto.Equal(in, &std) {
			t.Fatalf("proto.Unmarshal of the fast encoding: %v %v", err, &std)
		}
		var out pb.RelocationFrame
		if err := (Codec{}).Unmarshal(b, &out); err != nil || !proto.Equal(in, &out) {
			t.Fatalf("round trip: %v %v", err, &out)
		}
		// protobuf's own encoding (the data before the sum) decodes the same.
		pm, _ := proto.Marshal(in)
		var alt pb.RelocationFrame
		if err := (Codec{}).Unmarshal(binary.LittleEndian.AppendUint32(pm, wire.CRC32C(pm)), &alt); err != nil || !proto.Equal(in, &alt) {
			t.Fatalf("protobuf's field order: %v %v", err, &alt)
		}
		n := len(in.GetChunk().GetData())
		dataAt := len(body) - n
		for i := range b {
			c := append([]byte(nil), b...)
			c[i] ^= 0x10
			var x pb.RelocationFrame
			err := (Codec{}).Unmarshal(c, &x)
			if i >= dataAt && i < dataAt+n {
				if err != nil || wire.CRC32C(x.GetChunk().GetData()) == x.GetChunk().GetCrc32C() {
					t.Fatalf("flip at data byte %d: %v, or the damage matches the frame's sum", i-dataAt, err)
				}
				continue
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("flip at byte %d of %d (outside the data): %v (decoded %v)", i, len(b), err, &x)
			}
		}
	}
}

// gRPC gets the codec as a CodecV2 that sends a summed chunk's data without
// copying it, and the bytes on the wire are Codec's.
func TestCodecV2(t *testing.T) {
	if _, ok := encoding.GetCodecV2(CodecName).(codecV2); !ok {
		t.Fatalf("gRPC's codec %q is %T", CodecName, encoding.GetCodecV2(CodecName))
	}
	data := []byte("sealed state bytes")
	for _, in := range []proto.Message{
		&pb.RelocationFrame{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{RelocationId: []byte("id"), Index: 2, Data: data, Crc32C: proto.Uint32(wire.CRC32C(data))}}},
		&pb.RelocationFrame{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{RelocationId: []byte("id"), Crc32C: proto.Uint32(0)}}},
		&pb.RelocationFrame{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{RelocationId: []byte("id"), Data: data}}},
		&pb.CallRequest{Object: "actor/counter/c", Method: "add"},
	} {
		want, err := Codec{}.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		bs, err := codecV2{}.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := bs.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("%v: CodecV2 wrote %x, Codec %x", in, got, want)
		}
		if f, ok := in.(*pb.RelocationFrame); ok {
			if ch := f.GetChunk(); ch.Crc32C != nil && len(ch.Data) > 0 && &bs[1].ReadOnlyData()[0] != &data[0] {
				t.Fatal("a summed chunk's data was copied")
			}
		}
		out := in.ProtoReflect().New().Interface()
		if err := (codecV2{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(want)}, out); err != nil || !proto.Equal(in, out) {
			t.Fatalf("round trip: %v %v", err, out)
		}
	}
}

// The same chunk carrying its data's CRC32C (as the source sends it): the
// codec sums only the bytes around the data, and gRPC's codec (codecV2)
// does not copy the data to send it.
func BenchmarkCodecChunk1MiBSummed(b *testing.B) {
	data := make([]byte, 1<<20)
	m := &pb.RelocationFrame{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{RelocationId: make([]byte, 16), Index: 3, Data: data, Crc32C: proto.Uint32(wire.CRC32C(data))}}}
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	for b.Loop() {
		bs, _ := codecV2{}.Marshal(m)
		var out pb.RelocationFrame
		_ = codecV2{}.Unmarshal(bs, &out)
	}
}
