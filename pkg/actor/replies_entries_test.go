package actor

import (
	"errors"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/wire"
)

// A table kept entry by entry (Entries, bounds, watermark) is rebuilt into an
// equal table; bad pieces are refused.
func TestRestoreReplyTable(t *testing.T) {
	now := time.Now()
	tb := NewReplyTable(time.Minute, 3)
	var ids []wire.OperationID
	for i := range 5 {
		id := wire.NewOperationID()
		ids = append(ids, id)
		tb.Record(id, Reply{Code: 1, Payload: []byte{byte(i)}}, now)
		time.Sleep(2 * time.Millisecond)
	}
	if old, ok := tb.Oldest(); !ok || old != ids[2] {
		t.Fatalf("oldest %v %v, want %v", old, ok, ids[2])
	}
	es := tb.Entries()
	if len(es) != 3 || es[0].ID != ids[2] || es[2].Reply.Payload[0] != 4 {
		t.Fatalf("entries %+v", es)
	}
	// Any order in, the same table out.
	es[0], es[2] = es[2], es[0]
	got, err := RestoreReplyTable(tb.Window(), tb.MaxEntries(), tb.Watermark(), es)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Encode()) != string(tb.Encode()) {
		t.Fatal("restored table differs")
	}
	if _, dup, err := got.Check(ids[1], now); dup || !errors.Is(err, ErrOperationExpired) {
		t.Fatalf("an evicted id after restore: dup=%v %v, want expired", dup, err)
	}
	if _, ok := NewReplyTable(0, 0).Oldest(); ok {
		t.Fatal("empty table has an oldest id")
	}
	for name, f := range map[string]func() (*ReplyTable, error){
		"too many": func() (*ReplyTable, error) { return RestoreReplyTable(time.Minute, 2, time.Time{}, tb.Entries()) },
		"twice": func() (*ReplyTable, error) {
			return RestoreReplyTable(time.Minute, 9, time.Time{}, append(tb.Entries(), tb.Entries()[0]))
		},
		"no window": func() (*ReplyTable, error) { return RestoreReplyTable(0, 9, time.Time{}, nil) },
		"zero id":   func() (*ReplyTable, error) { return RestoreReplyTable(time.Minute, 9, time.Time{}, []ReplyEntry{{}}) },
		"max 0":     func() (*ReplyTable, error) { return RestoreReplyTable(time.Minute, 0, time.Time{}, nil) },
	} {
		if _, err := f(); !errors.Is(err, ErrCorruptState) {
			t.Errorf("%s: %v, want ErrCorruptState", name, err)
		}
	}
}
