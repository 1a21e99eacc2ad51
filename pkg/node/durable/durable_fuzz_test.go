package durable

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/wire"
)

// FuzzDecodeDurableState decodes a state/<object> value as a node does when
// it re-activates a durable object: authority.DecodeStateValue of the
// bytes read from etcd, then Decode with up to two persisted
// replies (the keys under state/<object>/replies/). No panic; a refusal
// wraps authority.ErrInvalidState or actor.ErrCorruptState (the node
// answers CODE_DATA_LOST and leaves the value alone); what is accepted
// restores exactly what was persisted: the instance's Snapshot is the
// state, the timers encode to the timers, and the reply tables have the
// persisted bounds, watermark and entries, so that the next write (built
// as persistChange builds it) persists the same bounds and keeps the same
// reply keys; the outbox encodes to the persisted outbox.
//
//	go test -run '^$' -fuzz '^FuzzDecodeDurableState$' -fuzztime 1m ./pkg/node/durable/
func FuzzDecodeDurableState(f *testing.F) {
	types := builtin.DurableTypes()
	op1 := wire.OperationID{0x01, 0x93, 0x5c, 0x2e, 0x4a, 0x10, 0x70, 0x01, 0x80, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77}
	op2 := wire.OperationID{0x01, 0x93, 0x5c, 0x2e, 0x4a, 0x11, 0x70, 0x01, 0x80, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x78}
	for i, ty := range types {
		state, err := ty.New().Snapshot()
		if err != nil {
			f.Fatal(err)
		}
		v := authority.StateValue{
			V: authority.StateVersion1, Object: "actor/" + ty.Name + "/o1", ObjectGeneration: 2, AuthorityGeneration: 5,
			Owner: record.OwnerRef{ID: "n1", Generation: 9}, Seq: 3, State: state,
			ReplyWindowMs: 60_000, ReplyMaxEntries: 4096, ReplyWatermarkMs: 1_700_000_000_000,
		}
		if ty.Name == builtin.DurableTickerType {
			tm := actor.NewTimers()
			if err := tm.Set(actor.TimerSpec{Name: builtin.TickerTimer, Period: 10 * time.Millisecond, Policy: actor.CatchUp, MaxCatchUp: 3},
				time.UnixMilli(1_700_000_000_000)); err != nil {
				f.Fatal(err)
			}
			v.Timers = tm.Encode()
		}
		if ty.Name == builtin.DurableBankType {
			var o actor.Outbox
			if err := o.Add([]actor.OutMessage{{ID: actor.MessageID(op1, 0), To: "actor/dbank/o2", Method: "hop", Args: [][]byte{[]byte("t1"), []byte("5")}, Ask: true}}, 0, 0); err != nil {
				f.Fatal(err)
			}
			v.Outbox = o.Encode()
		}
		f.Add(uint8(i), v.Encode(), ReplyID(op1), int32(0), []byte(`{"value":1}`), "", ReplyID(op2), int32(9), []byte(nil), "rejected", uint8(2))
	}
	f.Add(uint8(0), []byte(`{"v":1,"object":"actor/dcounter/c","objectGeneration":1,"authorityGeneration":1,"owner":{"id":"n1","generation":1},"seq":1,"state":"eyJ2IjoxLCJ2YWx1ZSI6MH0=","replyWindowMs":1000,"replyMaxEntries":1,"replyWatermarkMs":0}`),
		"", int32(0), []byte(nil), "", "", int32(0), []byte(nil), "", uint8(0))
	f.Add(uint8(0), []byte(`null`), "", int32(0), []byte(nil), "", "", int32(0), []byte(nil), "", uint8(0))
	f.Fuzz(func(t *testing.T, which uint8, value []byte, id1 string, code1 int32, payload1 []byte, msg1 string,
		id2 string, code2 int32, payload2 []byte, msg2 string, nreplies uint8) {
		ty := types[int(which)%len(types)]
		v, err := authority.DecodeStateValue(value)
		if err != nil {
			if !errors.Is(err, authority.ErrInvalidState) {
				t.Fatalf("DecodeStateValue(%q): untyped error %v", value, err)
			}
			return
		}
		rd := authority.StateRead{Found: true, Value: v, StateVersion: 11, Revision: 12}
		for _, r := range []authority.StateReply{
			{ID: id1, Value: authority.ReplyValue{Code: code1, Payload: payload1, Message: msg1}},
			{ID: id2, Value: authority.ReplyValue{Code: code2, Payload: payload2, Message: msg2}},
		}[:int(nreplies)%3] {
			rd.Replies = append(rd.Replies, r)
		}
		inst, timers, table, replies, outbox, err := Decode(ty, rd)
		if err != nil {
			if !errors.Is(err, actor.ErrCorruptState) {
				t.Fatalf("decodeDurable: untyped error %v", err)
			}
			if inst != nil || timers != nil || table != nil || replies != nil || outbox != nil {
				t.Fatal("refused, but returned parts")
			}
			return
		}
		if got := outbox.Encode(); !bytes.Equal(got, v.Outbox) && !(len(got) == 0 && len(v.Outbox) == 0) {
			t.Fatalf("outbox %x restored, re-encoded %x", v.Outbox, got)
		}
		if state, err := inst.Snapshot(); err != nil || !bytes.Equal(state, v.State) {
			t.Fatalf("%s restored from %q snapshots as %q (%v)", ty.Name, v.State, state, err)
		}
		if got := EncodeTimers(timers); !bytes.Equal(got, v.Timers) && !(len(got) == 0 && len(v.Timers) == 0) {
			t.Fatalf("timers %x restored, re-encoded %x", v.Timers, got)
		}
		if table == replies {
			t.Fatal("the persisted table and the in-memory one are the same table")
		}
		for _, tb := range []*actor.ReplyTable{table, replies} {
			// The fields of the next write (persistChange).
			if w, m, wm := tb.Window().Milliseconds(), tb.MaxEntries(), WatermarkMs(tb); w != v.ReplyWindowMs || m != v.ReplyMaxEntries || wm != v.ReplyWatermarkMs {
				t.Fatalf("persisted bounds %d ms, %d entries, watermark %d restored as %d ms, %d entries, watermark %d",
					v.ReplyWindowMs, v.ReplyMaxEntries, v.ReplyWatermarkMs, w, m, wm)
			}
			var got, want []string
			for _, e := range tb.Entries() {
				got = append(got, ReplyID(e.ID))
			}
			for _, r := range rd.Replies {
				want = append(want, r.ID)
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("reply keys %q restored as %q", want, got)
			}
		}
		if !bytes.Equal(table.Encode(), replies.Encode()) {
			t.Fatal("the in-memory table is not a copy of the persisted one")
		}
	})
}

// RestoreReplies refuses bounds and keys the node would not persist back
// as they are (FuzzDecodeDurableState's reply-window-overflow and
// reply-id-uppercase): a window whose milliseconds overflow a Duration
// (2^58 ms + 1 s wrapped to 1 s), and a reply key in uppercase hex (the
// node writes and deletes lowercase keys).
func TestRestoreRepliesRefuses(t *testing.T) {
	const id = "01935c2e4a1070018011223344556677"
	good := authority.StateValue{ReplyWindowMs: 1000, ReplyMaxEntries: 4}
	if tb, err := RestoreReplies(authority.StateRead{Value: good, Replies: []authority.StateReply{{ID: id}}}); err != nil || tb.Len() != 1 {
		t.Fatalf("a good table: %v", err)
	}
	for name, rd := range map[string]authority.StateRead{
		"window wraps":   {Value: authority.StateValue{ReplyWindowMs: 1<<58 + 1000, ReplyMaxEntries: 4}},
		"window 0":       {Value: authority.StateValue{ReplyWindowMs: 0, ReplyMaxEntries: 4}},
		"window too big": {Value: authority.StateValue{ReplyWindowMs: actor.MaxReplyWindow.Milliseconds() + 1, ReplyMaxEntries: 4}},
		"uppercase id":   {Value: good, Replies: []authority.StateReply{{ID: "01935C2E4A1070018011223344556677"}}},
		"short id":       {Value: good, Replies: []authority.StateReply{{ID: id[:30]}}},
	} {
		if _, err := RestoreReplies(rd); !errors.Is(err, actor.ErrCorruptState) {
			t.Errorf("%s: %v, want ErrCorruptState", name, err)
		}
	}
}
