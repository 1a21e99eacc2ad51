package reminder_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/meshloc/meshloc/pkg/reminder"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

func TestSchedule(t *testing.T) {
	once := reminder.Def{Name: "r", Seq: 1, FirstDueMs: 1000}
	every := reminder.Def{Name: "p", Seq: 2, FirstDueMs: 1000, PeriodMs: 500}
	for _, c := range []struct {
		d    reminder.Def
		due  int64
		want bool
	}{{once, 1000, true}, {once, 1500, false}, {every, 1000, true}, {every, 2500, true}, {every, 2499, false}, {every, 500, false}} {
		if got := c.d.OnSchedule(c.due); got != c.want {
			t.Errorf("%+v OnSchedule(%d) = %v", c.d, c.due, got)
		}
	}
	if n, ok := every.NextDue(1001); n != 1500 || !ok {
		t.Errorf("NextDue(1001) = %d %v, want 1500", n, ok)
	}
	if n, ok := every.NextDue(1500); n != 1500 || !ok {
		t.Errorf("NextDue(1500) = %d %v, want 1500", n, ok)
	}
	if n, ok := once.NextDue(2000); n != 1000 || ok {
		t.Errorf("a past one-shot: NextDue = %d %v", n, ok)
	}
}

// TestRoles: every shard has a primary and a distinct backup; a node's
// death moves only the shards it had; shards spread over nodes.
func TestRoles(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4"}
	count := map[string]int{}
	for s := range reminder.Shards {
		p, b := reminder.Roles(s, nodes)
		if p == "" || b == "" || p == b {
			t.Fatalf("shard %d: primary %q backup %q", s, p, b)
		}
		count[p]++
		p3, _ := reminder.Roles(s, nodes[:3])
		if p != "n4" && p3 != p {
			t.Errorf("shard %d moved from %s to %s when n4 left", s, p, p3)
		}
		if p == "n4" {
			if _, b4 := reminder.Roles(s, nodes); p3 != b4 {
				t.Errorf("shard %d: n4's backup %s did not take it (%s did)", s, b4, p3)
			}
		}
	}
	if len(count) < 3 {
		t.Errorf("shards spread over %d of 4 nodes: %v", len(count), count)
	}
	if p, b := reminder.Roles(0, nil); p != "" || b != "" {
		t.Error("roles without nodes")
	}
	if p, b := reminder.Roles(0, []string{"a"}); p != "a" || b != "" {
		t.Errorf("one node: %q %q", p, b)
	}
}

func TestArgs(t *testing.T) {
	f := reminder.Firing{Name: "tick:1", Seq: 7, DueMs: 1733000000000}
	got, err := reminder.ParseArgs(f.Args())
	if err != nil || got != f {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, bad := range [][][]byte{
		nil,
		{[]byte("a"), []byte("1")},
		{[]byte("a"), []byte("0"), []byte("5")},
		{[]byte("a"), []byte("+1"), []byte("5")},
		{[]byte("a"), []byte("1"), []byte("-5")},
		{[]byte(""), []byte("1"), []byte("5")},
		{[]byte("a b"), []byte("1"), []byte("5")},
	} {
		if _, err := reminder.ParseArgs(bad); !errors.Is(err, reminder.ErrInvalid) {
			t.Errorf("ParseArgs(%q) = %v", bad, err)
		}
	}
}

func TestEntry(t *testing.T) {
	s := reminder.Schedule("actor/dcounter/x", 3, reminder.Def{Name: "r", Seq: 9, FirstDueMs: 5, PeriodMs: 1000}, 5)
	e, err := reminder.DecodeEntry(s.Value)
	if err != nil || e.Object != "actor/dcounter/x" || e.Generation != 3 || e.Seq != 9 || e.PeriodMs != 1000 {
		t.Fatalf("%+v %v", e, err)
	}
	if s.ID != reminder.ID(e.Object, e.Name, e.Seq) || s.Shard != reminder.ShardOf(e.Object) {
		t.Fatal("id or shard")
	}
	d := reminder.Due{Shard: s.Shard, DueMs: 5, Entry: e}
	n, ok := d.Next()
	if !ok || n.DueMs != 1005 || n.ID != s.ID {
		t.Fatalf("next %+v %v", n, ok)
	}
	// The owner's persist of that firing writes what the scanner would.
	done, after, ok := reminder.After(e.Object, 3, reminder.Def{Name: "r", Seq: 9, FirstDueMs: 5, PeriodMs: 1000}, 5)
	if !ok || done.DueMs != 5 || done.ID != s.ID || done.Shard != s.Shard || done.Value != nil ||
		after.DueMs != n.DueMs || after.ID != n.ID || after.Shard != n.Shard || string(after.Value) != string(n.Value) {
		t.Fatalf("after: %+v %+v %v, want done at 5 and next %+v", done, after, ok, n)
	}
	if _, _, ok := reminder.After(e.Object, 3, reminder.Def{Name: "r", Seq: 9, FirstDueMs: 5}, 5); ok {
		t.Fatal("a one-shot has a next entry")
	}
	for _, bad := range []string{`{}`, `{"object":"group/g","name":"r","seq":1,"generation":1}`, `{"object":"actor/t/x","name":"r","seq":1,"generation":1,"extra":1}`,
		`{"object":"actor/t/x","name":"r","seq":0,"generation":1}`, `{"object":"actor/t/x","name":"r","seq":1,"generation":1,"periodMs":5}`} {
		if _, err := reminder.DecodeEntry([]byte(bad)); !errors.Is(err, reminder.ErrInvalid) {
			t.Errorf("DecodeEntry(%s) = %v", bad, err)
		}
	}
}

func TestJudge(t *testing.T) {
	for c, want := range map[pb.Code]reminder.Outcome{
		pb.Code_CODE_OK: reminder.Advanced, pb.Code_CODE_STATE_TOO_LARGE: reminder.Fired, pb.Code_CODE_DELETED: reminder.Gone, pb.Code_CODE_NOT_FOUND: reminder.Gone,
		pb.Code_CODE_OPERATION_EXPIRED: reminder.Expired, pb.Code_CODE_UNAVAILABLE: reminder.Retry,
		pb.Code_CODE_INTERNAL: reminder.Retry, pb.Code_CODE_RESOURCE_EXHAUSTED: reminder.Retry,
		pb.Code_CODE_UNKNOWN_TYPE: reminder.Retry, pb.Code_CODE_DATA_LOST: reminder.Retry,
	} {
		if got := reminder.Judge(&pb.CallReply{Code: c}); got != want {
			t.Errorf("Judge(%v) = %v, want %v", c, got, want)
		}
	}
	if got := reminder.Judge(&pb.CallReply{Code: pb.Code_CODE_OK, Replayed: true}); got != reminder.Replayed {
		t.Errorf("Judge(a replayed ok) = %v, want Replayed", got)
	}
	if got := reminder.Judge(nil); got != reminder.Retry {
		t.Errorf("Judge(nil) = %v, want Retry", got)
	}
}

func FuzzParseArgs(f *testing.F) {
	f.Add("r", "1", "1733000000000")
	f.Add("a b", "01", "x")
	f.Fuzz(func(t *testing.T, name, seq, due string) {
		fr, err := reminder.ParseArgs([][]byte{[]byte(name), []byte(seq), []byte(due)})
		if err != nil {
			return
		}
		back, err := reminder.ParseArgs(fr.Args())
		if err != nil || back != fr || fmt.Sprint(fr.Args()) != fmt.Sprint([][]byte{[]byte(name), []byte(seq), []byte(due)}) {
			t.Fatalf("accepted %q %q %q, not canonical: %+v %v", name, seq, due, back, err)
		}
	})
}

func FuzzDecodeEntry(f *testing.F) {
	f.Add(reminder.Schedule("actor/t/x", 1, reminder.Def{Name: "r", Seq: 1, FirstDueMs: 1}, 1).Value)
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := reminder.DecodeEntry(b)
		if err != nil {
			return
		}
		if _, err := reminder.DecodeEntry(e.Encode()); err != nil {
			t.Fatalf("re-encoding an accepted entry: %v", err)
		}
	})
}

func TestAdmit(t *testing.T) {
	defs := []reminder.Def{{Name: "a", Seq: 1, FirstDueMs: 1000}, {Name: "p", Seq: 4, FirstDueMs: 1000, PeriodMs: 1000}}
	for _, c := range []struct {
		f    reminder.Firing
		now  int64
		i    int
		want reminder.Verdict
	}{
		{reminder.Firing{Name: "a", Seq: 1, DueMs: 1000}, 1000, 0, reminder.Run},
		{reminder.Firing{Name: "a", Seq: 1, DueMs: 1000}, 999, 0, reminder.NotDue},
		{reminder.Firing{Name: "a", Seq: 2, DueMs: 1000}, 5000, -1, reminder.NoSuch},
		{reminder.Firing{Name: "p", Seq: 4, DueMs: 3000}, 5000, 1, reminder.Run},
		{reminder.Firing{Name: "p", Seq: 4, DueMs: 3500}, 5000, -1, reminder.NoSuch},
		{reminder.Firing{Name: "x", Seq: 1, DueMs: 1000}, 5000, -1, reminder.NoSuch},
	} {
		if i, v := reminder.Admit(defs, c.f, c.now); i != c.i || v != c.want {
			t.Errorf("Admit(%+v, %d) = %d %v, want %d %v", c.f, c.now, i, v, c.i, c.want)
		}
	}
}
