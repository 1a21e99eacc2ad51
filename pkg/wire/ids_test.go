package wire_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/meshloc/meshloc/pkg/wire"
)

func TestOperationIDRoundTrips(t *testing.T) {
	id := wire.NewOperationID()
	if id.IsZero() {
		t.Fatal("new operation id is zero")
	}
	if v := uuid.UUID(id).Version(); v != 7 {
		t.Fatalf("new operation id is version %d, want 7", v)
	}
	got, err := wire.ParseOperationIDBytes(id[:])
	if err != nil || got != id {
		t.Fatalf("bytes round trip: %v %v, want %v", got, err, id)
	}
	s := id.String()
	if len(s) != 36 || s != strings.ToLower(s) {
		t.Fatalf("text form %q: want 36 lower-case characters", s)
	}
	for _, text := range []string{s, strings.ReplaceAll(s, "-", ""), strings.ToUpper(s)} {
		got, err := wire.ParseOperationID(text)
		if err != nil || got != id {
			t.Errorf("ParseOperationID(%q) = %v %v, want %v", text, got, err, id)
		}
	}
}

// The ids are time ordered: one made later compares greater as bytes.
func TestOperationIDsAreOrdered(t *testing.T) {
	prev := wire.NewOperationID()
	for range 10_000 {
		id := wire.NewOperationID()
		if bytes.Compare(id[:], prev[:]) <= 0 {
			t.Fatalf("%v made after %v does not sort after it", id, prev)
		}
		prev = id
	}
}

func TestOperationIDTime(t *testing.T) {
	before := time.Now()
	id := wire.NewOperationID()
	after := time.Now()
	got := id.Time()
	// The id holds whole milliseconds.
	if got.Before(before.Truncate(time.Millisecond)) || got.After(after.Add(time.Second)) {
		t.Fatalf("id made in [%v, %v] says %v", before, after, got)
	}
}

func TestParseOperationIDBytesRejects(t *testing.T) {
	v4 := uuid.New()
	v7 := wire.NewOperationID()
	nil7 := v7
	nil7[6] = 0x00 // version nibble 0
	for name, b := range map[string][]byte{
		"nil":          nil,
		"empty":        {},
		"15 bytes":     v7[:15],
		"17 bytes":     append(v7[:], 0),
		"zero":         make([]byte, 16),
		"uuid v4":      v4[:],
		"uuid v1-like": func() []byte { u := v7; u[6] = 0x1f; return u[:] }(),
		"version 0":    nil7[:],
	} {
		id, err := wire.ParseOperationIDBytes(b)
		if !errors.Is(err, wire.ErrInvalidOperationID) {
			t.Errorf("%s: err %v, want ErrInvalidOperationID", name, err)
		}
		if err != nil && len(b) != wire.IDLen && !id.IsZero() {
			t.Errorf("%s: refused id of the wrong length returned %v", name, id)
		}
	}
}

func TestParseOperationIDRejects(t *testing.T) {
	v7 := wire.NewOperationID().String()
	for _, s := range []string{
		"",
		"not-a-uuid",
		"00000000-0000-0000-0000-000000000000",
		uuid.New().String(), // v4
		v7[:35],
		v7 + "0",
		strings.Replace(v7, "-", "_", 1),
		" " + v7,
	} {
		if _, err := wire.ParseOperationID(s); !errors.Is(err, wire.ErrInvalidOperationID) {
			t.Errorf("ParseOperationID(%q): err %v, want ErrInvalidOperationID", s, err)
		}
	}
}

func TestRoutingID(t *testing.T) {
	r := wire.NewRoutingID()
	if r.IsZero() {
		t.Fatal("new routing id is zero")
	}
	if other := wire.NewRoutingID(); other == r {
		t.Fatal("two new routing ids are equal")
	}
	h := r.Hex()
	if len(h) != 2*wire.IDLen || h != strings.ToLower(h) || r.String() != h {
		t.Fatalf("hex %q, string %q: want %d lower-case hex digits, twice", h, r.String(), 2*wire.IDLen)
	}
	for _, s := range []string{h, strings.ToUpper(h)} {
		got, err := wire.ParseRoutingIDHex(s)
		if err != nil || got != r {
			t.Errorf("ParseRoutingIDHex(%q) = %v %v, want %v", s, got, err, r)
		}
	}
	got, err := wire.ParseRoutingIDBytes(r[:])
	if err != nil || got != r {
		t.Fatalf("bytes round trip: %v %v", got, err)
	}
}

func TestRoutingIDEqualComparesBytes(t *testing.T) {
	r := wire.NewRoutingID()
	same := bytes.Clone(r[:])
	if !r.Equal(same) {
		t.Fatal("not equal to a copy of its bytes")
	}
	flipped := bytes.Clone(r[:])
	flipped[wire.IDLen-1] ^= 1
	for name, b := range map[string][]byte{
		"last bit flipped": flipped,
		"nil":              nil,
		"prefix":           r[:wire.IDLen-1],
		"longer":           append(bytes.Clone(r[:]), 0),
		"hex form":         []byte(r.Hex()),
	} {
		if r.Equal(b) {
			t.Errorf("equal to %s %x", name, b)
		}
	}
}

func TestParseRoutingIDRejects(t *testing.T) {
	h := wire.NewRoutingID().Hex()
	for _, s := range []string{
		"",
		h[:31],
		h[:30],
		h + "00",
		"0x" + h[2:],
		"g" + h[1:],
		" " + h[1:],
		h[:16] + "-" + h[17:],
		strings.Repeat("zz", wire.IDLen),
	} {
		if _, err := wire.ParseRoutingIDHex(s); !errors.Is(err, wire.ErrInvalidID) {
			t.Errorf("ParseRoutingIDHex(%q): err %v, want ErrInvalidID", s, err)
		}
	}
	r := wire.NewRoutingID()
	for name, b := range map[string][]byte{
		"nil": nil, "15 bytes": r[:15], "17 bytes": append(r[:], 1), "zero": make([]byte, wire.IDLen),
	} {
		if _, err := wire.ParseRoutingIDBytes(b); !errors.Is(err, wire.ErrInvalidID) {
			t.Errorf("ParseRoutingIDBytes(%s): err %v, want ErrInvalidID", name, err)
		}
	}
}

func TestRelocationID(t *testing.T) {
	r := wire.NewRelocationID()
	if r == (wire.RelocationID{}) {
		t.Fatal("new relocation id is zero")
	}
	if other := wire.NewRelocationID(); other == r {
		t.Fatal("two new relocation ids are equal")
	}
	got, err := wire.ParseRelocationIDBytes(r[:])
	if err != nil || got != r {
		t.Fatalf("bytes round trip: %v %v", got, err)
	}
	u, err := uuid.Parse(r.String())
	if err != nil || wire.RelocationID(u) != r || len(r.String()) != 36 {
		t.Fatalf("text form %q: %v", r.String(), err)
	}
	for name, b := range map[string][]byte{
		"nil": nil, "15 bytes": r[:15], "17 bytes": append(r[:], 1), "zero": make([]byte, wire.IDLen),
	} {
		if _, err := wire.ParseRelocationIDBytes(b); !errors.Is(err, wire.ErrInvalidID) {
			t.Errorf("ParseRelocationIDBytes(%s): err %v, want ErrInvalidID", name, err)
		}
	}
}
