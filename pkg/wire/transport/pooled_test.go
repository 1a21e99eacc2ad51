package transport

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// received is what gRPC hands the codec for m: its encoding, in pieces of
// 16 KiB as frames arrive.
func received(t *testing.T, m proto.Message) mem.BufferSlice {
	t.Helper()
	bs, err := codecV2{}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	b := bs.Materialize()
	var out mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 16<<10)
		out = append(out, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	return out
}

func chunkFrame(data []byte) *pb.RelocationFrame {
	return &pb.RelocationFrame{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{
		RelocationId: make([]byte, 16), Index: 7, Data: data, Crc32C: proto.Uint32(wire.CRC32C(data))}}}
}

// A large chunk received as a PooledFrame sits in a pooled buffer that its
// stream's Recycler tracks and gives back once; a small frame, or one whose
// data the decoder copies, is not tracked; a damaged frame is refused.
func TestPooledFrame(t *testing.T) {
	data := bytes.Repeat([]byte("state!"), 200_000)
	var r Recycler
	in := PooledFrame{RelocationFrame: &pb.RelocationFrame{}}
	if err := (codecV2{}).Unmarshal(received(t, chunkFrame(data)), &in); err != nil {
		t.Fatal(err)
	}
	got := in.RelocationFrame.GetChunk().GetData()
	if !bytes.Equal(got, data) || in.RelocationFrame.GetChunk().GetIndex() != 7 {
		t.Fatalf("decoded chunk differs: %d bytes, index %d", len(got), in.RelocationFrame.GetChunk().GetIndex())
	}
	r.Track(&in)
	if r.Tracked() != 1 {
		t.Fatalf("tracked %d, want 1", r.Tracked())
	}
	r.Recycle(append([]byte(nil), got...)) // equal bytes elsewhere: not its buffer
	r.Recycle(got[1:])                     // inside it, but not the chunk
	if r.Tracked() != 1 {
		t.Fatal("recycled a slice the recycler did not hand out")
	}
	r.Recycle(got)
	r.Recycle(got) // twice: the second is ignored
	if r.Tracked() != 0 {
		t.Fatalf("tracked %d after recycling, want 0", r.Tracked())
	}

	small := PooledFrame{RelocationFrame: &pb.RelocationFrame{}}
	if err := (codecV2{}).Unmarshal(received(t, chunkFrame([]byte("tiny"))), &small); err != nil {
		t.Fatal(err)
	}
	r.Track(&small)
	big := &pb.RelocationFrame{Frame: &pb.RelocationFrame_Cutover{Cutover: &pb.Cutover{RelocationId: bytes.Repeat([]byte{1}, 100_000)}}}
	other := PooledFrame{RelocationFrame: &pb.RelocationFrame{}}
	if err := (codecV2{}).Unmarshal(received(t, big), &other); err != nil {
		t.Fatal(err)
	}
	reused := getBuffer(200_000) // most likely the buffer it was decoded from
	for i := range *reused {
		(*reused)[i] = 0xee
	}
	if !proto.Equal(other.RelocationFrame, big) {
		t.Fatal("a large frame that is not a chunk kept its pooled buffer after giving it back")
	}
	r.Track(&other)
	if r.Tracked() != 0 {
		t.Fatalf("tracked %d frames that hold no pooled buffer", r.Tracked())
	}

	bad := received(t, chunkFrame(data))
	b := bad.Materialize()
	b[len(b)-1] ^= 1 // the frame's sum (its data is the assembly's to check)
	if err := (codecV2{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &PooledFrame{RelocationFrame: &pb.RelocationFrame{}}); err == nil {
		t.Fatal("a damaged chunk frame decoded")
	}
}
