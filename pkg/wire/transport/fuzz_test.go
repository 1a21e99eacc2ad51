package transport

import (
	"encoding/binary"
	"errors"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Fuzz targets of the checked codec's chunk fast path. Run one with, e.g.,
//
//	go test -run '^$' -fuzz '^FuzzChunkFrame$' -fuzztime 1m ./pkg/wire/transport/
//
// and keep any crasher it writes to testdata/fuzz as a regression seed.

func seedChunkFrames() []*pb.RelocationFrame {
	id := []byte("0123456789abcdef")
	data := []byte("sealed state bytes")
	return []*pb.RelocationFrame{
		{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{RelocationId: id, Index: 7, Data: data}}},
		{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{RelocationId: id, Index: 300, Data: data, Crc32C: proto.Uint32(wire.CRC32C(data))}}},
		{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{RelocationId: id, Data: data, Crc32C: proto.Uint32(1)}}}, // a wrong sum
		{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{RelocationId: id, Crc32C: proto.Uint32(0)}}},
		{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{Index: 1<<32 - 1}}},
		{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{}}},
		{Frame: &pb.RelocationFrame_Ready{Ready: &pb.Ready{RelocationId: id}}},
		{Frame: &pb.RelocationFrame_Prepare{Prepare: &pb.Prepare{RelocationId: id, ChunkCount: 3, Crc32C: 9}}},
		{},
	}
}

// withSum is body followed by its CRC32C, as Codec sends it (a new slice).
func withSum(body []byte) []byte {
	return binary.LittleEndian.AppendUint32(append(make([]byte, 0, len(body)+4), body...), wire.CRC32C(body))
}

// FuzzChunkFrame decodes arbitrary bytes with the chunk fast path and with
// Codec, and compares both with proto.Unmarshal of the same bytes: the
// codec never accepts what protobuf refuses, and whatever both accept is
// the same message. The only frames the codec may refuse that protobuf
// accepts (with a correct trailer) are chunk frames whose crc32c field does
// not match their data: the sum stands for the data, which the target's
// assembly checks. Every accepted message is re-encoded by Codec and by
// gRPC's codecV2 and must decode to itself.
func FuzzChunkFrame(f *testing.F) {
	for _, fr := range seedChunkFrames() {
		b, err := Codec{}.Marshal(fr)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-4])
		pm, err := proto.Marshal(fr)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(pm)
	}
	chunk := func(fields ...[]byte) []byte {
		var inner []byte
		for _, x := range fields {
			inner = append(inner, x...)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), inner)
	}
	bytesField := func(n protowire.Number, v string) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, n, protowire.BytesType), []byte(v))
	}
	varintField := func(n protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, n, protowire.VarintType), v)
	}
	fixedField := func(n protowire.Number, v uint32) []byte {
		return protowire.AppendFixed32(protowire.AppendTag(nil, n, protowire.Fixed32Type), v)
	}
	for _, body := range [][]byte{
		chunk(bytesField(3, "d"), varintField(2, 5), bytesField(1, "id")),
		chunk(bytesField(3, "a"), bytesField(3, "b")),
		chunk(bytesField(9, "unknown"), bytesField(3, "d")),
		chunk(varintField(2, 1<<33)),
		chunk(fixedField(4, wire.CRC32C([]byte("d"))), bytesField(3, "d")),
		chunk(fixedField(4, 1), fixedField(4, 2)),
		append(chunk(bytesField(3, "d")), varintField(99, 1)...),
		append(chunk(bytesField(3, "a")), chunk(bytesField(1, "b"))...),
		chunk(varintField(3, 1)),
		{0x12, 0x05, 0x1a},
		{0x12, 0x80, 0x80, 0x80, 0x80, 0x10},
	} {
		f.Add(body)
		f.Add(withSum(body))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		body := append([]byte(nil), in...) // the fast path aliases its input
		var std pb.RelocationFrame
		perr := proto.Unmarshal(body, &std)

		// The fast path alone.
		c, off, ok := parseChunkFrame(body)
		if ok {
			if perr != nil {
				t.Fatalf("the fast path accepts %x, which proto.Unmarshal refuses: %v", body, perr)
			}
			got := &pb.RelocationFrame{Frame: &pb.RelocationFrame_Chunk{Chunk: c}}
			if !proto.Equal(got, &std) {
				t.Fatalf("fast path decoded %v, proto.Unmarshal %v", got, &std)
			}
			if off < 0 || off+len(c.Data) > len(body) || cap(c.Data) != len(c.Data) {
				t.Fatalf("data at offset %d, %d bytes (capacity %d) in a body of %d", off, len(c.Data), cap(c.Data), len(body))
			}
			if len(c.Data) > 0 && &c.Data[0] != &body[off] {
				t.Fatal("chunk data does not alias the body at its offset")
			}
			if c.Crc32C == nil || c.GetCrc32C() == wire.CRC32C(c.Data) {
				if got, want := chunkFrameSum(body, c, off), wire.CRC32C(body); got != want {
					t.Fatalf("chunk frame sum %#x, CRC32C of the body %#x", got, want)
				}
			}
		}

		// Codec with a correct trailer.
		var dec pb.RelocationFrame
		cerr := Codec{}.Unmarshal(withSum(body), &dec)
		switch {
		case cerr == nil && perr != nil:
			t.Fatalf("Codec accepts %x, which proto.Unmarshal refuses: %v", body, perr)
		case cerr == nil && !proto.Equal(&dec, &std):
			t.Fatalf("Codec decoded %v, proto.Unmarshal %v", &dec, &std)
		case cerr != nil && perr == nil:
			if !ok || c.Crc32C == nil || c.GetCrc32C() == wire.CRC32C(c.Data) || !errors.Is(cerr, ErrCorrupt) {
				t.Fatalf("Codec refuses %x (%v), which proto.Unmarshal decodes to %v", body, cerr, &std)
			}
		}

		// The same, received into a pooled buffer: the same outcome, and
		// the buffer kept exactly when the chunk's data lies in it.
		buf := withSum(body)
		pooled := PooledFrame{RelocationFrame: &pb.RelocationFrame{}}
		perr2 := pooled.decode(&buf)
		switch {
		case (perr2 == nil) != (cerr == nil):
			t.Fatalf("pooled decode %v, Codec %v", perr2, cerr)
		case perr2 == nil && !proto.Equal(pooled.RelocationFrame, &dec):
			t.Fatalf("pooled decode %v, Codec %v", pooled.RelocationFrame, &dec)
		case perr2 == nil && (pooled.buf != nil) != (len(pooled.RelocationFrame.GetChunk().GetData()) > 0 && within(pooled.RelocationFrame.GetChunk().GetData(), buf)):
			t.Fatalf("pooled decode kept its buffer: %v, for %v", pooled.buf != nil, pooled.RelocationFrame)
		}

		// Codec with the input's own last 4 bytes as the trailer.
		var raw pb.RelocationFrame
		if err := (Codec{}).Unmarshal(append([]byte(nil), in...), &raw); err == nil {
			var want pb.RelocationFrame
			if err := proto.Unmarshal(in[:len(in)-4], &want); err != nil {
				t.Fatalf("Codec accepts %x, whose body proto.Unmarshal refuses: %v", in, err)
			}
			if !proto.Equal(&raw, &want) {
				t.Fatalf("Codec decoded %v, proto.Unmarshal %v", &raw, &want)
			}
		} else if !errors.Is(err, ErrCorrupt) && proto.Unmarshal(in[:max(len(in)-4, 0)], new(pb.RelocationFrame)) == nil && len(in) >= 4 {
			// A refusal other than the sum's is protobuf's own.
			t.Fatalf("Codec refuses %x with %v, proto.Unmarshal decodes its body", in, err)
		}

		if perr == nil {
			codecRoundTrip(t, &std)
		}
	})
}

// FuzzChunkFrameRoundTrip encodes a chunk frame built from the inputs with
// Codec and with gRPC's codecV2 and decodes it back: the same bytes from
// both, the same message, its data aliasing the received buffer, and
// protobuf's own decoding of the frame agrees.
func FuzzChunkFrameRoundTrip(f *testing.F) {
	for _, fr := range seedChunkFrames() {
		if c := fr.GetChunk(); c != nil {
			f.Add(c.RelocationId, c.Index, c.Data, c.Crc32C != nil, c.GetCrc32C())
		}
	}
	f.Add([]byte(nil), uint32(0), make([]byte, 300), true, uint32(0))
	f.Fuzz(func(t *testing.T, rid []byte, index uint32, data []byte, summed bool, crc uint32) {
		c := &pb.StateChunk{RelocationId: rid, Index: index, Data: data}
		if summed {
			c.Crc32C = proto.Uint32(crc)
		}
		fr := &pb.RelocationFrame{Frame: &pb.RelocationFrame_Chunk{Chunk: c}}
		b := codecRoundTrip(t, fr)
		var std pb.RelocationFrame
		if err := proto.Unmarshal(b[:len(b)-4], &std); err != nil || !proto.Equal(fr, &std) {
			t.Fatalf("proto.Unmarshal of Codec's encoding: %v %v", err, &std)
		}
		if !summed && binary.LittleEndian.Uint32(b[len(b)-4:]) != wire.CRC32C(b[:len(b)-4]) {
			t.Fatal("the trailer of an unsummed frame is not the CRC32C of its body")
		}
		var out pb.RelocationFrame
		if err := (Codec{}).Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		if d := out.GetChunk().GetData(); len(d) > 0 && &d[0] != &b[len(b)-4-len(d)] {
			t.Fatal("chunk data was copied, not aliased")
		}
	})
}

// codecRoundTrip encodes m with Codec and codecV2 (the same bytes) and
// decodes it with both: the same message. It returns Codec's encoding.
func codecRoundTrip(t *testing.T, m *pb.RelocationFrame) []byte {
	t.Helper()
	b, err := Codec{}.Marshal(m)
	if err != nil {
		t.Fatalf("Codec.Marshal of a decoded frame: %v", err)
	}
	bs, err := codecV2{}.Marshal(m)
	if err != nil {
		t.Fatalf("codecV2.Marshal of a decoded frame: %v", err)
	}
	if v2 := bs.Materialize(); string(v2) != string(b) {
		t.Fatalf("codecV2 wrote %x, Codec %x", v2, b)
	}
	var back pb.RelocationFrame
	if err := (Codec{}).Unmarshal(append([]byte(nil), b...), &back); err != nil {
		t.Fatalf("Codec refuses its own encoding %x of %v: %v", b, m, err)
	}
	if !proto.Equal(m, &back) {
		t.Fatalf("round trip through Codec changed the frame:\n%v\n%v", m, &back)
	}
	var back2 pb.RelocationFrame
	if err := (codecV2{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(append([]byte(nil), b...))}, &back2); err != nil || !proto.Equal(m, &back2) {
		t.Fatalf("round trip through codecV2: %v\n%v\n%v", err, m, &back2)
	}
	return b
}
