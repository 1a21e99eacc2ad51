package node_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshloc/meshloc/pkg/node"
	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// A relocation's id is public while it is paced (listed in the phase
// "pacing"). A stranger who sends the target a PREPARE under that id first
// — refused, or staged and left hanging — does not stop the real
// relocation: stages are told apart by their nonce, which only the real
// source knows.
func TestPoisonedRelocationIDHarmless(t *testing.T) {
	m, _, src, names, _ := pacedMesh(t, "actor/counter/x")
	ctx := context.Background()
	if st, err := src.Relocate(ctx, names[1], node.RelocateOptions{}); err != nil || st.GetOutcome() != "completed" {
		t.Fatalf("first background relocation: %+v %v", st, err) // the pacer's burst of one
	}
	st, err := src.Relocate(ctx, names[2], node.RelocateOptions{Timeout: 40 * time.Second, Detach: true})
	if err != nil || st.GetPhase() != "pacing" {
		t.Fatalf("a detached background relocation while paced: %+v %v, want it waiting", st, err)
	}
	id := st.GetRelocationId()
	dst := m.nodes[1]

	conn, err := grpc.NewClient(dst.Address(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	poison := func(p *pb.Prepare) *pb.RelocationFrame {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		s, err := rpcpb.NewPeerServiceClient(conn).Relocate(sctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&pb.RelocationFrame{Frame: &pb.RelocationFrame_Prepare{Prepare: p}}); err != nil {
			t.Fatal(err)
		}
		fr, err := s.Recv()
		if err != nil {
			t.Fatalf("the stranger's PREPARE: %v", err)
		}
		return fr
	}
	nonce := make([]byte, wire.NonceLen)
	_, _ = rand.Read(nonce)
	// Refused by the target's machine (it names no participant): before,
	// its tombstone answered the real PREPARE "repeated with other bytes".
	fr := poison(&pb.Prepare{Version: wire.Version, RelocationId: id, Nonce: nonce})
	if fr.GetFailed() == nil {
		t.Fatalf("the stranger's PREPARE: %v, want FAILED", fr)
	}
	t.Logf("the stranger's PREPARE: %v %s", fr.GetFailed().GetCode(), fr.GetFailed().GetMessage())

	// Now the relocation goes (a drain starts the waiting ones at once).
	if _, err := src.Drain(ctx, node.DrainOptions{}); err != nil {
		t.Fatalf("drain: %v", err)
	}
	waitFor(t, 30*time.Second, "the paced relocation ended", func() bool {
		for _, r := range src.Relocations() {
			if bytes.Equal(r.GetRelocationId(), id) && r.GetRole() == "source" {
				if r.GetOutcome() != "" && r.GetOutcome() != "completed" {
					t.Fatalf("the real relocation under the poisoned id: %s %v %s", r.GetOutcome(), r.GetCode(), r.GetMessage())
				}
				return r.GetOutcome() == "completed"
			}
		}
		t.Fatal("the paced relocation is no longer listed")
		return false
	})
	if o := m.owner(t, names[2]); o != dst {
		t.Fatalf("%s is on %v, want the target", names[2], o)
	}
}
