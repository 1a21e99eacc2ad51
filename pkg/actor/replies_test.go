package actor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// opID is a UUIDv7 made at t (millisecond precision), told apart by seq.
func opID(t time.Time, seq uint32) wire.OperationID {
	var id wire.OperationID
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		id[i] = byte(ms >> (40 - 8*i))
	}
	id[6] = 0x70 // version 7
	id[8] = 0x80 // RFC 9562 variant
	binary.BigEndian.PutUint32(id[12:], seq)
	return id
}

func okReply(s string) Reply { return Reply{Code: int32(pb.Code_CODE_OK), Payload: []byte(s)} }

func TestOpIDHelperMakesValidIDs(t *testing.T) {
	id := opID(at(ms(7)), 1)
	if _, err := wire.ParseOperationIDBytes(id[:]); err != nil {
		t.Fatal(err)
	}
	if !id.Time().Equal(at(ms(7))) {
		t.Fatalf("Time() = %v", id.Time())
	}
}

func TestReplyTableRetryGetsFirstReply(t *testing.T) {
	rt := NewReplyTable(0, 0)
	if rt.Window() != DefaultReplyWindow || rt.MaxEntries() != DefaultReplyEntries {
		t.Fatalf("defaults: %s %d", rt.Window(), rt.MaxEntries())
	}
	id := opID(t0, 1)
	if _, ran, err := rt.Check(id, t0); ran || err != nil {
		t.Fatalf("first Check: ran=%v err=%v", ran, err)
	}
	payload := []byte(`{"value":1}`)
	rt.Record(id, Reply{Code: int32(pb.Code_CODE_OK), Payload: payload}, t0)
	payload[0] = 'X' // the table kept its own copy
	rt.Record(id, okReply("second"), t0)

	r, ran, err := rt.Check(id, at(30*time.Second))
	if err != nil || !ran || string(r.Payload) != `{"value":1}` {
		t.Fatalf("retry: %q ran=%v err=%v", r.Payload, ran, err)
	}
	r.Payload[0] = 'Y' // nor does a caller reach into it
	if r, _, _ := rt.Check(id, t0); string(r.Payload) != `{"value":1}` {
		t.Fatalf("the table's reply changed: %q", r.Payload)
	}
	if rt.Len() != 1 {
		t.Fatalf("Len = %d", rt.Len())
	}
}

func TestReplyTableErrorRepliesAreTerminal(t *testing.T) {
	rt := NewReplyTable(time.Minute, 10)
	id := opID(t0, 1)
	rt.Record(id, ReplyOf(nil, Rejected("insufficient funds")), t0)
	r, ran, err := rt.Check(id, t0)
	if err != nil || !ran || r.Code != int32(pb.Code_CODE_APPLICATION_ERROR) || r.Message != "actor: rejected: insufficient funds" {
		t.Fatalf("got %+v ran=%v err=%v", r, ran, err)
	}
}

// Timeline, window 10 s: ids made at t0; the clock moves on.
func TestReplyTableWindow(t *testing.T) {
	rt := NewReplyTable(10*time.Second, 100)
	tests := []struct {
		name string
		id   wire.OperationID
		now  time.Time
		want error
	}{
		{"fresh", opID(t0, 1), t0, nil},
		{"at the edge of the window", opID(t0, 1), at(10 * time.Second), nil},
		{"one millisecond past the window", opID(t0, 1), at(10*time.Second + ms(1)), ErrOperationExpired},
		{"from the future, within the window (clock skew)", opID(at(10*time.Second), 1), t0, nil},
		{"from further in the future than the window", opID(at(10*time.Second+ms(1)), 1), t0, ErrInvalidOperation},
		{"zero id", wire.OperationID{}, t0, ErrInvalidOperation},
		{"not a UUIDv7", func() wire.OperationID { id := opID(t0, 1); id[6] = 0x40; return id }(), t0, ErrInvalidOperation},
	}
	for _, tc := range tests {
		_, ran, err := rt.Check(tc.id, tc.now)
		if ran || !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: ran=%v err=%v, want %v", tc.name, ran, err, tc.want)
		}
	}

	// Record evicts what the window has passed, and remembers it.
	rt.Record(opID(t0, 1), okReply("a"), t0)
	rt.Record(opID(at(5*time.Second), 2), okReply("b"), at(5*time.Second))
	rt.Record(opID(at(12*time.Second), 3), okReply("c"), at(12*time.Second))
	if rt.Len() != 2 || !rt.Watermark().Equal(t0) {
		t.Fatalf("after window eviction: len %d watermark %v", rt.Len(), rt.Watermark())
	}
	// The object moves to a node whose clock is 20 s behind: the window
	// alone would let the evicted id run again; the watermark refuses it.
	behind := at(-8 * time.Second)
	if _, _, err := rt.Check(opID(t0, 1), behind); !errors.Is(err, ErrOperationExpired) {
		t.Fatalf("evicted id on a clock behind: %v", err)
	}
	if _, ran, err := rt.Check(opID(at(5*time.Second), 2), behind); !ran || err != nil {
		t.Fatalf("kept id on a clock behind: ran=%v err=%v", ran, err)
	}
}

func TestReplyTableEvictionRaisesWatermark(t *testing.T) {
	rt := NewReplyTable(time.Minute, 3)
	now := at(time.Second)
	for i := range 5 { // ids made 0, 100, ..., 400 ms after t0
		rt.Record(opID(at(ms(100*i)), uint32(i)), okReply("r"), now)
	}
	if rt.Len() != 3 || !rt.Watermark().Equal(at(ms(100))) {
		t.Fatalf("len %d watermark t0+%s, want 3 and t0+100ms", rt.Len(), rt.Watermark().Sub(t0))
	}
	tests := []struct {
		name string
		id   wire.OperationID
		ran  bool
		err  error
	}{
		{"evicted: refused, never run again", opID(t0, 0), false, ErrOperationExpired},
		{"evicted last: refused", opID(at(ms(100)), 1), false, ErrOperationExpired},
		{"never seen, at the watermark: could have been evicted", opID(at(ms(100)), 99), false, ErrOperationExpired},
		{"never seen, below the watermark", opID(at(ms(50)), 99), false, ErrOperationExpired},
		{"kept", opID(at(ms(200)), 2), true, nil},
		{"never seen, above the watermark: may run", opID(at(ms(150)), 99), false, nil},
	}
	for _, tc := range tests {
		_, ran, err := rt.Check(tc.id, now)
		if ran != tc.ran || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%s: ran=%v err=%v, want ran=%v err=%v", tc.name, ran, err, tc.ran, tc.err)
		}
	}
	// An id recorded out of order, older than all, is evicted at once.
	rt.Record(opID(at(ms(150)), 99), okReply("late"), now)
	if rt.Len() != 3 || !rt.Watermark().Equal(at(ms(150))) {
		t.Fatalf("len %d watermark t0+%s", rt.Len(), rt.Watermark().Sub(t0))
	}
}

func TestReplyTableEncodeRoundTrip(t *testing.T) {
	rt := sampleReplyTable()
	b := rt.Encode()
	got, err := DecodeReplyTable(b)
	if err != nil {
		t.Fatal(err)
	}
	if !sameTable(got, rt) {
		t.Fatalf("decode(encode(x)) != x:\n got %+v\nwant %+v", got, rt)
	}
	if !bytes.Equal(got.Encode(), b) {
		t.Fatal("not deterministic")
	}
	// The decoded table behaves the same: a retry is answered, an evicted id refused.
	now := at(2 * time.Second)
	if r, ran, err := got.Check(opID(at(ms(900)), 9), now); !ran || err != nil || string(r.Payload) != "p9" {
		t.Fatalf("retry after decode: %q %v %v", r.Payload, ran, err)
	}
	if _, _, err := got.Check(opID(t0, 0), now); !errors.Is(err, ErrOperationExpired) {
		t.Fatalf("evicted after decode: %v", err)
	}
	if _, err := DecodeReplyTable(NewReplyTable(0, 0).Encode()); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeReplyTableRejects(t *testing.T) {
	good := sampleReplyTable().Encode()
	header := func(window, maxEntries uint64, watermark int64, n uint64) []byte {
		b := []byte{replyMagic, replyVersion}
		b = binary.AppendUvarint(b, window)
		b = binary.AppendUvarint(b, maxEntries)
		b = binary.AppendVarint(b, watermark)
		return binary.AppendUvarint(b, n)
	}
	entry := func(id wire.OperationID) []byte { return append(id[:], 2, 0, 0) }
	tests := map[string][]byte{
		"empty":                           nil,
		"other magic":                     {timersMagic, 1, 0},
		"other version":                   {replyMagic, 9},
		"truncated":                       good[:len(good)-1],
		"trailing bytes":                  append(bytes.Clone(good), 0),
		"zero window":                     header(0, 10, 0, 0),
		"window too long":                 header(uint64(MaxReplyWindow.Milliseconds())+1, 10, 0, 0),
		"zero max entries":                header(1000, 0, 0, 0),
		"max entries too many":            header(1000, MaxReplyEntries+1, 0, 0),
		"negative watermark":              header(1000, 10, -1, 0),
		"more entries than the max":       append(header(1000, 1, 0, 2), append(entry(opID(t0, 1)), entry(opID(t0, 2))...)...),
		"more entries than bytes":         header(1000, 10, 0, 5),
		"huge payload length":             append(header(1000, 10, 0, 1), append(entry(opID(t0, 1))[:wire.IDLen+1], 0xff, 0xff, 0xff, 0xff, 0x0f)...),
		"zero id":                         append(header(1000, 10, 0, 1), entry(wire.OperationID{})...),
		"entries out of order":            append(header(1000, 10, 0, 2), append(entry(opID(t0, 2)), entry(opID(t0, 1))...)...),
		"repeated entry":                  append(header(1000, 10, 0, 2), append(entry(opID(t0, 1)), entry(opID(t0, 1))...)...),
		"overlong varint (non-canonical)": append([]byte{replyMagic, replyVersion, 0xe8, 0x87, 0x80, 0x00}, good[4:]...),
	}
	for name, b := range tests {
		if _, err := DecodeReplyTable(b); !errors.Is(err, ErrCorruptState) {
			t.Errorf("%s: DecodeReplyTable = %v, want ErrCorruptState", name, err)
		}
	}
}

func TestCodeOf(t *testing.T) {
	tests := []struct {
		err  error
		want pb.Code
	}{
		{nil, pb.Code_CODE_OK},
		{UnknownMethod("counter", "mul"), pb.Code_CODE_UNKNOWN_METHOD},
		{InvalidArgument("x"), pb.Code_CODE_INVALID_ARGUMENT},
		{Rejected("x"), pb.Code_CODE_APPLICATION_ERROR},
		{ErrOperationExpired, pb.Code_CODE_OPERATION_EXPIRED},
		{ErrInvalidOperation, pb.Code_CODE_INVALID_OPERATION_ID},
		{ErrStateTooLarge, pb.Code_CODE_STATE_TOO_LARGE},
		{errors.New("boom"), pb.Code_CODE_INTERNAL},
	}
	for _, tc := range tests {
		if got := CodeOf(tc.err); got != tc.want {
			t.Errorf("CodeOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func FuzzDecodeReplyTable(f *testing.F) {
	f.Add(NewReplyTable(0, 0).Encode())
	f.Add(sampleReplyTable().Encode())
	f.Add([]byte{replyMagic, replyVersion, 0xe8, 0x07, 2, 0, 1})
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rt, err := DecodeReplyTable(b)
		if err != nil {
			if !errors.Is(err, ErrCorruptState) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		e := rt.Encode()
		if !bytes.Equal(e, b) {
			t.Fatalf("encode(decode(b)) != b:\n%x\n%x", e, b)
		}
		again, err := DecodeReplyTable(e)
		if err != nil || !sameTable(again, rt) {
			t.Fatalf("decode(encode(x)) != x: %v", err)
		}
		// A decoded table can be used without panicking.
		now := t0
		for _, e := range rt.Entries() {
			id := e.ID
			now = id.Time()
			if _, ran, err := rt.Check(id, now); !ran || err != nil {
				t.Fatalf("recorded id %s not answered: %v", id, err)
			}
		}
		rt.Record(opID(now, 0xffffffff), okReply("x"), now)
		if rt.Len() > rt.MaxEntries() {
			t.Fatalf("len %d over max %d", rt.Len(), rt.MaxEntries())
		}
	})
}

// sampleReplyTable: window 1 s, 4 entries at most, ids made every 100 ms from
// t0 to t0+900ms; the first 6 evicted for room (watermark t0+500ms).
func sampleReplyTable() *ReplyTable {
	rt := NewReplyTable(time.Second, 4)
	for i := range 10 {
		r := okReply("p" + string(rune('0'+i)))
		if i == 7 {
			r = ReplyOf(nil, InvalidArgument("bad %d", i))
		}
		if i == 8 {
			r = Reply{Code: int32(pb.Code_CODE_OK)} // empty payload
		}
		rt.Record(opID(at(ms(100*i)), uint32(i)), r, at(ms(100*i)))
	}
	return rt
}

// Prune drops what the window passed, as Record does, keeps the rest, and
// leaves an empty table that still refuses what it evicted and records
// anew.
func TestReplyTablePrune(t *testing.T) {
	rt := NewReplyTable(time.Minute, 0)
	rt.Record(opID(at(ms(0)), 1), okReply("a"), at(ms(0)))
	rt.Record(opID(at(ms(30_000)), 2), okReply("b"), at(ms(30_000)))
	rt.Prune(at(ms(61_000)))
	if rt.Len() != 1 {
		t.Fatalf("after the first expired: %d entries, want 1", rt.Len())
	}
	rt.Prune(at(ms(100_000)))
	if rt.Len() != 0 || rt.replyData != nil || !rt.Watermark().Equal(at(ms(30_000))) {
		t.Fatalf("after both expired: len %d, entries kept %v, watermark t0+%s", rt.Len(), rt.replyData != nil, rt.Watermark().Sub(t0))
	}
	if _, ran, err := rt.Check(opID(at(ms(30_000)), 2), at(ms(100_000))); ran || !errors.Is(err, ErrOperationExpired) {
		t.Fatalf("an evicted operation: ran=%v err=%v", ran, err)
	}
	id := opID(at(ms(99_000)), 3)
	rt.Record(id, okReply("c"), at(ms(100_000)))
	if r, ran, err := rt.Check(id, at(ms(100_000))); !ran || err != nil || string(r.Payload) != "c" {
		t.Fatalf("recorded after the prune: %v %v %v", r, ran, err)
	}
	if !bytes.Equal(rt.Encode(), rt.Encode()) {
		t.Fatal("encode")
	}
}

// sameTable: two tables hold the same bounds, watermark and replies (their
// arenas may differ in what was evicted and not yet compacted).
func sameTable(a, b *ReplyTable) bool {
	return a.window == b.window && a.maxEntries == b.maxEntries && a.watermark == b.watermark &&
		liveBytes(a) == liveBytes(b) && reflect.DeepEqual(a.Entries(), b.Entries())
}

func liveBytes(t *ReplyTable) int {
	if t.replyData == nil {
		return 0
	}
	return t.live
}

// The arena holds what the table holds, not every reply it ever recorded:
// a table that records a million replies through 4,096 slots stays within
// about twice its live bytes, and every reply left reads back whole.
func TestReplyTableArenaCompacts(t *testing.T) {
	rt := NewReplyTable(time.Hour, 64)
	now := t0
	for i := range 100_000 {
		now = t0.Add(time.Duration(i) * time.Millisecond)
		r := okReply(strings.Repeat("p", i%50))
		if i%7 == 0 {
			r = ReplyOf(nil, InvalidArgument("bad %d", i))
		}
		rt.Record(opID(now, uint32(i)), r, now)
		if len(rt.arena) > 2*rt.live+4096 {
			t.Fatalf("after %d replies: arena %d bytes for %d live", i+1, len(rt.arena), rt.live)
		}
	}
	for i, e := range rt.Entries() {
		n := 100_000 - 64 + i
		want := okReply(strings.Repeat("p", n%50))
		if n%7 == 0 {
			want = ReplyOf(nil, InvalidArgument("bad %d", n))
		}
		if len(want.Payload) == 0 {
			want.Payload = nil
		}
		if !reflect.DeepEqual(e.Reply, want) || e.ID != opID(t0.Add(time.Duration(n)*time.Millisecond), uint32(n)) {
			t.Fatalf("entry %d: %+v, want %+v", i, e.Reply, want)
		}
	}
	if got, err := DecodeReplyTable(rt.Encode()); err != nil || !sameTable(got, rt) {
		t.Fatalf("round trip after compaction: %v", err)
	}
}
