package stages

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

func key(nonce string) Key {
	return KeyOf(wire.NewRelocationID(), &pb.Prepare{Nonce: []byte(nonce)})
}

// A target holds at most its limits, refuses a stage it holds already,
// and gets its slots back once each: nothing a peer sends outlives them.
func TestIncomingBounds(t *testing.T) {
	var in Incoming
	lim := Limits{Stages: 3, StagesPerPeer: 2, Bytes: 100}
	k1, k2 := key("a"), key("b")
	busy, dup, r1 := in.Admit(lim, k1, "n2", 40)
	if busy != "" || dup {
		t.Fatalf("first: %q %v", busy, dup)
	}
	if _, dup, _ := in.Admit(lim, k1, "n3", 1); !dup {
		t.Fatal("the same stage twice was admitted")
	}
	if busy, _, _ := in.Admit(lim, key("c"), "n2", 70); !strings.Contains(busy, "bytes") {
		t.Fatalf("past the bytes: %q", busy)
	}
	_, _, r2 := in.Admit(lim, k2, "n2", 10)
	if busy, _, _ := in.Admit(lim, key("d"), "n2", 1); !strings.Contains(busy, "from n2") {
		t.Fatalf("past the per-peer bound: %q", busy)
	}
	_, _, r3 := in.Admit(lim, key("e"), "n3", 1)
	if busy, _, _ := in.Admit(lim, key("f"), "n4", 1); !strings.Contains(busy, "3 relocation stages") {
		t.Fatalf("past the stages: %q", busy)
	}
	r1()
	r1() // once
	r2()
	r3()
	if in.stages != 0 || in.bytes != 0 || len(in.perPeer) != 0 || len(in.ids) != 0 {
		t.Fatalf("after release: %d stages, %d bytes, %v, %d ids", in.stages, in.bytes, in.perPeer, len(in.ids))
	}
}

// A PREPARE under a stage that ended gets its answer again; other bytes
// under that key are refused; the same id with another nonce is another
// stage; the oldest tombstones go first.
func TestTombstones(t *testing.T) {
	ts := NewTombstones(2)
	id := wire.NewRelocationID()
	real := KeyOf(id, &pb.Prepare{Nonce: []byte("real")})
	ans := &pb.RelocationFrame{Frame: &pb.RelocationFrame_Failed{Failed: &pb.Failed{Code: pb.Code_CODE_CONFLICT}}}
	ts.Remember(real, [32]byte{1}, ans)
	if a, ok := ts.Answer(real, [32]byte{1}); !ok || a.GetFailed().GetCode() != pb.Code_CODE_CONFLICT {
		t.Fatalf("same PREPARE: %v %v", a, ok)
	}
	if a, ok := ts.Answer(real, [32]byte{2}); !ok || a.GetFailed().GetCode() != pb.Code_CODE_PROTOCOL_ERROR {
		t.Fatalf("other bytes: %v %v", a, ok)
	}
	if _, ok := ts.Answer(KeyOf(id, &pb.Prepare{Nonce: []byte("stranger")}), [32]byte{1}); ok {
		t.Fatal("a stranger's nonce met the real stage's tombstone")
	}
	ts.Remember(key("x"), [32]byte{}, nil)
	ts.Remember(key("y"), [32]byte{}, nil)
	if _, ok := ts.Answer(real, [32]byte{1}); ok {
		t.Fatal("the oldest tombstone was kept past the bound")
	}
}

// A chunk waits for room in the node's and the peer's budgets, and gives
// up when its context ends.
func TestBudgets(t *testing.T) {
	b := NewBudgets(100, 60)
	chunk := b.Chunk("n2")
	rel, err := chunk(context.Background(), 50)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := chunk(ctx, 20); err == nil {
		t.Fatal("the peer's budget was exceeded")
	}
	other, err := b.Chunk("n3")(context.Background(), 40)
	if err != nil {
		t.Fatal(err)
	}
	rel()
	other()
	if b.node.used != 0 || b.peer("n2").used != 0 {
		t.Fatalf("used %d, %d after release", b.node.used, b.peer("n2").used)
	}
}
