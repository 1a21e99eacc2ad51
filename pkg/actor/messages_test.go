package actor

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/wire"
)

// A message id is a function of its parent and index, a valid UUIDv7 with
// the parent's time, that a destination's ReplyTable accepts.
func TestMessageIDDeterministicUUIDv7(t *testing.T) {
	parent := opID(t0, 42)
	seen := map[wire.OperationID]bool{}
	for i := range uint32(64) {
		id := MessageID(parent, i)
		if id != MessageID(parent, i) {
			t.Fatalf("index %d: two derivations differ", i)
		}
		if _, err := wire.ParseOperationIDBytes(id[:]); err != nil {
			t.Fatalf("index %d: %v", i, err)
		}
		if !id.Time().Equal(parent.Time()) {
			t.Fatalf("index %d: time %v, parent's %v", i, id.Time(), parent.Time())
		}
		if seen[id] || id == parent {
			t.Fatalf("index %d: id %s seen before", i, id)
		}
		seen[id] = true
		rt := NewReplyTable(0, 0)
		if _, ran, err := rt.Check(id, t0.Add(time.Second)); ran || err != nil {
			t.Fatalf("a fresh table refuses message %s: ran=%v %v", id, ran, err)
		}
	}
	if MessageID(opID(t0, 43), 0) == MessageID(parent, 0) {
		t.Fatal("two parents give one id")
	}
	r := ReplyOperationID(MessageID(parent, 0))
	if seen[r] || !r.Time().Equal(parent.Time()) {
		t.Fatalf("reply id %s", r)
	}
	if r != ReplyOperationID(MessageID(parent, 0)) {
		t.Fatal("reply id not deterministic")
	}
	if _, err := wire.ParseOperationIDBytes(r[:]); err != nil {
		t.Fatal(err)
	}
}

func TestTimerOperationID(t *testing.T) {
	at := t0.Add(90 * time.Minute)
	a := TimerOperationID("actor/ticker/t1", "tick", 7, at)
	if a != TimerOperationID("actor/ticker/t1", "tick", 7, at) {
		t.Fatal("not deterministic")
	}
	if _, err := wire.ParseOperationIDBytes(a[:]); err != nil || !a.Time().Equal(at) {
		t.Fatalf("%s: %v, time %v", a, err, a.Time())
	}
	for _, b := range []wire.OperationID{
		TimerOperationID("actor/ticker/t1", "tick", 8, at),
		TimerOperationID("actor/ticker/t2", "tick", 7, at),
		TimerOperationID("actor/ticker/t1", "tock", 7, at),
		// The separators keep (object, name) pairs apart.
		TimerOperationID("actor/ticker/t1t", "ick", 7, at),
	} {
		if b == a {
			t.Fatalf("collision with %s", b)
		}
	}
}

func TestValidateMessage(t *testing.T) {
	big := make([]byte, wire.MaxArgsBytes+1)
	cases := []struct {
		name       string
		to, method string
		args       [][]byte
		ok         bool
	}{
		{"ok", "actor/bank/b1", "hop", [][]byte{[]byte("x")}, true},
		{"no args", "actor/bank/b1", "read", nil, true},
		{"group", "group/g1", "members", nil, false},
		{"not canonical", "actor//b1", "read", nil, false},
		{"garbage", "../owners", "read", nil, false},
		{"no method", "actor/bank/b1", "", nil, false},
		{"long method", "actor/bank/b1", strings.Repeat("m", wire.MaxMethodLen+1), nil, false},
		{"too many args", "actor/bank/b1", "m", make([][]byte, wire.MaxArgs+1), false},
		{"too many bytes", "actor/bank/b1", "m", [][]byte{big}, false},
	}
	for _, c := range cases {
		err := ValidateMessage(c.to, c.method, c.args)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrInvalidMessage)) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
