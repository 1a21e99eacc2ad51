package session

import (
	"bytes"
	"testing"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
	"google.golang.org/protobuf/proto"
)

// FuzzJournalOf: a journal comes from a peer in a relocation's payload. Any
// bytes either decode to a journal whose bounds hold and whose wire form
// decodes to the same journal, or are refused; never a panic.
func FuzzJournalOf(f *testing.F) {
	j := NewJournal(ref(3))
	for _, s := range []string{"a", "bb", "ccc"} {
		if _, err := j.Push([]byte(s), ""); err != nil {
			f.Fatal(err)
		}
	}
	if err := j.Ack(1); err != nil {
		f.Fatal(err)
	}
	seed, _ := proto.Marshal(j.Proto())
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m pb.SessionJournal
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		j, err := JournalOf(&m)
		if err != nil {
			return
		}
		if len(j.Pending) > MaxPending || j.bytes > MaxPendingBytes || j.AckedPush >= j.NextPush {
			t.Fatalf("bounds: %d pending, %d bytes, acked %d next %d", len(j.Pending), j.bytes, j.AckedPush, j.NextPush)
		}
		again, err := JournalOf(j.Proto())
		if err != nil {
			t.Fatalf("the wire form of a decoded journal is refused: %v", err)
		}
		if again.Gateway != j.Gateway || again.NextPush != j.NextPush || again.AckedPush != j.AckedPush ||
			again.LastCall != j.LastCall || len(again.Pending) != len(j.Pending) {
			t.Fatalf("round trip: %+v != %+v", again, j)
		}
		for i := range j.Pending {
			if again.Pending[i].Seq != j.Pending[i].Seq || !bytes.Equal(again.Pending[i].Payload, j.Pending[i].Payload) {
				t.Fatalf("push %d: %+v != %+v", i, again.Pending[i], j.Pending[i])
			}
		}
	})
}
