package session

import (
	"errors"
	"fmt"
	"testing"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

func ref(binding uint64) Ref {
	return Ref{Session: NewID(), Gateway: "g1", Generation: 3, RoutingID: wire.NewRoutingID(), Address: "127.0.0.1:7300", Binding: binding}
}

func TestJournal(t *testing.T) {
	j := NewJournal(ref(0))
	if j.Gateway.Binding != 1 || j.NextPush != 1 {
		t.Fatalf("new journal %+v", j)
	}
	for i := range 5 {
		p, err := j.Push([]byte{byte(i)}, "")
		if err != nil || p.Seq != uint64(i+1) {
			t.Fatalf("push %d: %+v %v", i, p, err)
		}
	}
	if err := j.Ack(2); err != nil || len(j.Pending) != 3 || j.Pending[0].Seq != 3 {
		t.Fatalf("ack 2: %v %+v", err, j.Pending)
	}
	if err := j.Ack(9); !errors.Is(err, ErrInvalid) || len(j.Pending) != 3 {
		t.Fatalf("ack beyond the last: %v", err)
	}
	if got := j.After(3); len(got) != 2 || got[0].Seq != 4 {
		t.Fatalf("after 3: %+v", got)
	}
	// A resume from another gateway that received 4: a new binding.
	g2 := ref(0)
	b, err := j.Bind(g2, 4)
	if err != nil || b != 2 || !j.Gateway.SameGateway(g2) || len(j.Pending) != 1 || j.AckedPush != 4 {
		t.Fatalf("bind: %d %v %+v", b, err, j)
	}
	// Calls in order; a gap (calls refused before they ran); retries.
	for _, tc := range []struct {
		seq          uint64
		retry, fails bool
	}{{1, false, false}, {3, false, false}, {2, true, false}, {3, true, false}, {0, false, true}} {
		retry, err := j.Call(tc.seq)
		if retry != tc.retry || (err != nil) != tc.fails {
			t.Errorf("call %d: retry %v err %v", tc.seq, retry, err)
		}
		if err == nil && !retry {
			j.Executed(tc.seq)
		}
	}
	if retry, err := j.Call(1); !retry || err != nil {
		t.Errorf("call 1 again: %v %v", retry, err)
	}
	// Bounds.
	big := NewJournal(ref(0))
	if _, err := big.Push(make([]byte, MaxPushBytes+1), ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("oversized push: %v", err)
	}
	for range MaxPending {
		if _, err := big.Push(nil, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := big.Push(nil, ""); !errors.Is(err, ErrBacklog) || wire.CodeOf(err) != pb.Code_CODE_RESOURCE_EXHAUSTED {
		t.Errorf("push past the backlog: %v", err)
	}
}

// A journal from the network round-trips, and a malformed one is refused.
func TestJournalOf(t *testing.T) {
	j := NewJournal(ref(0))
	for range 3 {
		_, _ = j.Push([]byte("x"), "")
	}
	_ = j.Ack(1)
	j.Executed(4)
	back, err := JournalOf(j.Proto())
	if err != nil || fmt.Sprint(back.Pending) != fmt.Sprint(j.Pending) || back.LastCall != 4 || back.Gateway != j.Gateway || back.NextPush != 4 {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	bad := func(f func(m *pb.SessionJournal)) *pb.SessionJournal { m := j.Proto(); f(m); return m }
	for name, m := range map[string]*pb.SessionJournal{
		"no gateway":     bad(func(m *pb.SessionJournal) { m.Gateway = nil }),
		"bad session id": bad(func(m *pb.SessionJournal) { m.Gateway.SessionId = []byte{1} }),
		"next 0":         bad(func(m *pb.SessionJournal) { m.NextPush = 0 }),
		"gap":            bad(func(m *pb.SessionJournal) { m.Pending = m.Pending[1:] }),
		"short":          bad(func(m *pb.SessionJournal) { m.Pending = m.Pending[:1] }),
		"acked too far":  bad(func(m *pb.SessionJournal) { m.AckedPush = 9 }),
		"huge push":      bad(func(m *pb.SessionJournal) { m.Pending[0].Payload = make([]byte, MaxPushBytes+1) }),
		"zero gen":       bad(func(m *pb.SessionJournal) { m.Gateway.GatewayGeneration = 0 }),
	} {
		if _, err := JournalOf(m); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
