package transport

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

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
