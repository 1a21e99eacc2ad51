package builtin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
)

// call is one request of a transcript and its expected answer: a reply, or
// an error that errors.Is err.
type call struct {
	method string
	args   []string
	want   string
	err    error
}

func c(method string, args ...string) call { return call{method: method, args: args} }
func (x call) is(want string) call         { x.want = want; return x }
func (x call) fails(err error) call        { x.err = err; return x }

func args(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func newObject(t *testing.T, typ string) actor.Object {
	t.Helper()
	for _, ty := range Types() {
		if ty.Name == typ {
			return ty.New()
		}
	}
	t.Fatalf("no type %q", typ)
	return nil
}

// play runs a transcript, and after every call checks that the state
// survives a move: Snapshot → Restore into a fresh instance → same snapshot.
func play(t *testing.T, typ string, obj actor.Object, ctx *fakeContext, calls []call) actor.Object {
	t.Helper()
	for i, cl := range calls {
		before, err := obj.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		got, err := obj.Handle(ctx, cl.method, args(cl.args))
		where := fmt.Sprintf("#%d %s %s", i, cl.method, strings.Join(cl.args, " "))
		if cl.err != nil {
			if !errors.Is(err, cl.err) {
				t.Fatalf("%s: err = %v, want %v", where, err, cl.err)
			}
			after, _ := obj.Snapshot()
			if !bytes.Equal(before, after) {
				t.Fatalf("%s: a refused call changed the state", where)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if string(got) != cl.want {
			t.Fatalf("%s:\n got %s\nwant %s", where, got, cl.want)
		}
		obj = moved(t, typ, obj)
	}
	return obj
}

func moved(t *testing.T, typ string, obj actor.Object) actor.Object {
	t.Helper()
	snap, err := obj.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	fresh := newObject(t, typ)
	if err := fresh.Restore(bytes.Clone(snap)); err != nil {
		t.Fatalf("Restore(Snapshot()): %v\n%s", err, snap)
	}
	again, err := fresh.Snapshot()
	if err != nil || !bytes.Equal(again, snap) {
		t.Fatalf("snapshot changed in a move:\n%s\n%s", snap, again)
	}
	return fresh
}

var (
	errArg     = actor.ErrInvalidArgument
	errMethod  = actor.ErrUnknownMethod
	errReject  = actor.ErrRejected
	errCorrupt = actor.ErrCorruptState
)

func TestCounter(t *testing.T) {
	play(t, CounterType, newObject(t, CounterType), newFakeContext(CounterType), []call{
		c("get").is(`{"value":0}`),
		c("add", "5").is(`{"value":5}`),
		c("add", "-7").is(`{"value":-2}`),
		c("get").is(`{"value":-2}`),
		c("add", "9223372036854775807").is(`{"value":9223372036854775805}`),
		c("add", "3").fails(errReject), // overflow
		c("add", "1.5").fails(errArg),
		c("add", "x").fails(errArg),
		c("add", "99999999999999999999").fails(errArg),
		c("add").fails(errArg),
		c("add", "1", "2").fails(errArg),
		c("get", "1").fails(errArg),
		c("mul", "2").fails(errMethod),
		c("").fails(errMethod),
	})
}

func TestRegister(t *testing.T) {
	play(t, RegisterType, newObject(t, RegisterType), newFakeContext(RegisterType), []call{
		c("get").is(`{"value":"","version":0}`),
		c("put", "a").is(`{"version":1}`),
		c("get").is(`{"value":"a","version":1}`),
		c("cas", "a", "b").is(`{"ok":true,"value":"b","version":2}`),
		c("cas", "a", "c").is(`{"ok":false,"value":"b","version":2}`), // a mismatch is an answer
		c("put", "").is(`{"version":3}`),
		c("cas", "", "<&>").is(`{"ok":true,"value":"<&>","version":4}`),
		c("put", "\xff").fails(errArg),
		c("cas", "<&>", "\xfe").fails(errArg),
		c("put", strings.Repeat("x", MaxRegisterValue+1)).fails(errArg),
		c("put").fails(errArg),
		c("cas", "x").fails(errArg),
		c("delete").fails(errMethod),
	})
}

// A register restored at the largest version refuses writes instead of
// wrapping the version into a state Restore refuses (FuzzHandle's
// register-version-overflow); reads and a cas that does not match answer.
func TestRegisterVersionOverflow(t *testing.T) {
	obj := newObject(t, RegisterType)
	must(t, obj.Restore([]byte(`{"v":1,"value":"x","version":9223372036854775807}`)))
	play(t, RegisterType, obj, newFakeContext(RegisterType), []call{
		c("get").is(`{"value":"x","version":9223372036854775807}`),
		c("put", "y").fails(errReject),
		c("cas", "x", "y").fails(errReject),
		c("cas", "z", "y").is(`{"ok":false,"value":"x","version":9223372036854775807}`),
	})
}

func TestList(t *testing.T) {
	obj := play(t, ListType, newObject(t, ListType), newFakeContext(ListType), []call{
		c("read").is(`{"items":[]}`),
		c("append", "x").is(`{"length":1}`),
		c("append", `<"&">`).is(`{"length":2}`),
		c("append", "").is(`{"length":3}`),
		c("read").is(`{"items":["x","<\"&\">",""]}`),
		c("append", "\xff").fails(errArg),
		c("append").fails(errArg),
		c("read", "0").fails(errArg),
		c("pop").fails(errMethod),
	})
	// Full: append is rejected and nothing changes.
	big := strings.Repeat("y", MaxListBytes/2)
	play(t, ListType, obj, newFakeContext(ListType), []call{
		c("append", big).is(`{"length":4}`),
		c("append", big).fails(errReject),
	})
}

func TestBank(t *testing.T) {
	ctx := newFakeContext(BankType)
	play(t, BankType, newObject(t, BankType), ctx, []call{
		c("read").is(`{"balances":{"a0":100,"a1":100,"a2":100,"a3":100,"a4":100,"a5":100,"a6":100,"a7":100},"ledger":[],"total":800}`),
		c("transfer", "a0", "a1", "30", "tx-1").is(`{"ok":true}`),
		c("transfer", "a0", "a1", "30", "tx-1").fails(errReject),  // duplicate txid
		c("transfer", "a1", "a2", "131", "tx-2").fails(errReject), // insufficient funds
		c("transfer", "a1", "a2", "130", "tx-2").is(`{"ok":true}`),
		c("transfer", "a8", "a2", "1", "tx-3").fails(errArg),
		c("transfer", "a0", "b1", "1", "tx-3").fails(errArg),
		c("transfer", "a0", "a0", "1", "tx-3").fails(errArg),
		c("transfer", "a0", "a1", "0", "tx-3").fails(errArg),
		c("transfer", "a0", "a1", "-5", "tx-3").fails(errArg),
		c("transfer", "a0", "a1", "five", "tx-3").fails(errArg),
		c("transfer", "a0", "a1", "1", "tx 3").fails(errArg),
		c("transfer", "a0", "a1", "1", "").fails(errArg),
		c("transfer", "a0", "a1", "1").fails(errArg),
		c("read").is(`{"balances":{"a0":70,"a1":0,"a2":230,"a3":100,"a4":100,"a5":100,"a6":100,"a7":100},"ledger":["tx-1","tx-2"],"total":800}`),
		c("read", "a0").fails(errArg),
		c("withdraw", "a0", "5").fails(errMethod),
	})
	var rejected error = actor.Rejected("x")
	if !errors.Is(rejected, actor.ErrRejected) {
		t.Fatal("Rejected does not wrap ErrRejected")
	}
}

func TestBlob(t *testing.T) {
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	reply := func(b []byte) string { return fmt.Sprintf(`{"size":%d,"sha256":"%s"}`, len(b), sum(b)) }
	c1000, c1000s := BlobContent(1000, ""), BlobContent(1000, "s")
	if bytes.Equal(c1000, c1000s) || !bytes.Equal(c1000, BlobContent(1000, "")) || bytes.Equal(BlobContent(999, ""), c1000[:999]) {
		t.Fatal("BlobContent is not a function of (size, seed) alone")
	}
	obj := play(t, BlobType, newObject(t, BlobType), newFakeContext(BlobType), []call{
		c("hash").is(reply(nil)),
		c("fill", "1000").is(reply(c1000)),
		c("hash").is(reply(c1000)),
		c("fill", "1000", "s").is(reply(c1000s)),
		c("fill", "0").is(reply(nil)),
		c("fill", "1000").is(reply(c1000)),
		c("fill", "-1").fails(errArg),
		c("fill", fmt.Sprint(MaxBlobBytes+1)).fails(errArg),
		c("fill", "1k").fails(errArg),
		c("fill").fails(errArg),
		c("fill", "1", "2", "3").fails(errArg),
		c("hash", "x").fails(errArg),
		c("size").is(`{"size":1000}`),
		c("size", "x").fails(errArg),
		c("read").fails(errMethod),
	})
	snap, _ := obj.Snapshot()
	if !bytes.Equal(snap, c1000) {
		t.Fatal("a blob's snapshot is not its raw bytes")
	}
}

// The content of a blob is part of the interface: scripts compare hashes
// across nodes and versions. This pins it.
func TestBlobContentIsStable(t *testing.T) {
	s := sha256.Sum256(BlobContent(4096, "meshloc"))
	const want = "2cfbcecc60b402ee10ac6c490151405fbc0d82dfb69485f44eb646587f02a64b"
	if got := hex.EncodeToString(s[:]); got != want {
		t.Fatalf("BlobContent(4096, meshloc) has sha256 %s, want %s", got, want)
	}
}

func TestTicker(t *testing.T) {
	ctx := newFakeContext(TickerType)
	obj := newObject(t, TickerType)
	handle := func(method string, a ...string) string {
		t.Helper()
		b, err := obj.Handle(ctx, method, args(a))
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		return string(b)
	}
	if got := handle("start", "100"); got != `{"count":0,"last":0,"ok":true}` {
		t.Fatal(got)
	}
	if tm, ok := ctx.timers.Get(TickerTimer); !ok || tm.Spec.Policy != actor.CatchUp || tm.Spec.MaxCatchUp != DefaultTickerCatchUp {
		t.Fatalf("timer %+v", tm)
	}
	must(t, ctx.advance(obj, 350*time.Millisecond)) // 3 ticks
	if got := handle("read"); got != `{"count":3,"last":3,"ok":true}` {
		t.Fatal(got)
	}

	// A move: the object's state and its timers leave this "node" and resume
	// on another after a pause of 1 s (10 periods: caught up, none lost).
	obj = moved(t, TickerType, obj)
	timers, err := actor.DecodeTimers(ctx.timers.Encode())
	must(t, err)
	ctx = &fakeContext{obj: ctx.obj, now: ctx.now, timers: timers}
	must(t, ctx.advance(obj, time.Second))
	if got := handle("read"); got != `{"count":13,"last":13,"ok":true}` {
		t.Fatal(got)
	}

	// A tick delivered twice (a runtime bug) is seen.
	must(t, obj.(actor.TimerObject).OnTimer(ctx, actor.Tick{Name: TickerTimer, Index: 13}))
	if got := handle("read"); got != `{"count":14,"last":13,"ok":false}` {
		t.Fatal(got)
	}
	// start again: counts reset, the timer starts again from index 1.
	if got := handle("start", "50", "skip"); got != `{"count":0,"last":0,"ok":true}` {
		t.Fatal(got)
	}
	must(t, ctx.advance(obj, 175*time.Millisecond)) // late past two ticks: Skip delivers one
	if got := handle("read"); got != `{"count":1,"last":1,"ok":true}` {
		t.Fatal(got)
	}
	if got := handle("stop"); got != `{"count":1,"last":1,"ok":true}` || ctx.timers.Len() != 0 {
		t.Fatalf("stop: %s, %d timers", got, ctx.timers.Len())
	}
	must(t, ctx.advance(obj, time.Second))
	if got := handle("read"); got != `{"count":1,"last":1,"ok":true}` {
		t.Fatal(got)
	}
	obj = moved(t, TickerType, obj)

	for _, a := range [][]string{
		{}, {"0"}, {"-1"}, {"x"}, {"100", "sometimes"}, {"100", "skip", "5"},
		{"100", "catchup", "0"}, {"100", "catchup", fmt.Sprint(actor.MaxCatchUpLimit + 1)}, {"1", "catchup", "1", "x"},
	} {
		if _, err := obj.Handle(ctx, "start", args(a)); !errors.Is(err, errArg) {
			t.Errorf("start %v: %v, want invalid argument", a, err)
		}
	}
	if _, err := obj.Handle(ctx, "start", args([]string{"20", "fireonce"})); err != nil {
		t.Fatal(err)
	}
	if _, err := obj.Handle(ctx, "tick", nil); !errors.Is(err, errMethod) {
		t.Fatal(err)
	}
}

func TestRestoreRejectsGarbage(t *testing.T) {
	garbage := []string{"", "garbage", "null", "[]", "{}", `{"v":1}x`, "\xff"}
	perType := map[string][]string{
		CounterType: {
			`{"v":2,"value":1}`, `{"v":1,"value":1,"extra":2}`, `{"v":1,"value":1.5}`, `{"v":1, "value":1}`,
			`{"V":1,"value":1}`, `{"v":1,"value":1,"value":2}`, `{"value":1,"v":1}`, `{"v":1,"value":"1"}`,
		},
		RegisterType: {`{"v":1,"value":"x","version":-1}`, `{"v":1,"value":"x","version":0}`, `{"v":1,"value":"x"}`},
		ListType:     {`{"v":1,"items":null}`, `{"v":1,"items":[1]}`},
		BankType: {
			`{"v":1,"balances":{"a0":800},"ledger":[]}`,
			`{"v":1,"balances":{"a0":100,"a1":100,"a2":100,"a3":100,"a4":100,"a5":100,"a6":100,"a7":101},"ledger":[]}`,
			`{"v":1,"balances":{"a0":-100,"a1":300,"a2":100,"a3":100,"a4":100,"a5":100,"a6":100,"a7":100},"ledger":[]}`,
			`{"v":1,"balances":{"a0":100,"a1":100,"a2":100,"a3":100,"a4":100,"a5":100,"a6":100,"a8":100},"ledger":[]}`,
			`{"v":1,"balances":{"a0":100,"a1":100,"a2":100,"a3":100,"a4":100,"a5":100,"a6":100,"a7":100},"ledger":["t","t"]}`,
			`{"v":1,"balances":{"a0":100,"a1":100,"a2":100,"a3":100,"a4":100,"a5":100,"a6":100,"a7":100},"ledger":["a b"]}`,
			`{"v":1,"balances":{"a0":100,"a1":100,"a2":100,"a3":100,"a4":100,"a5":100,"a6":100,"a7":100},"ledger":null}`,
		},
		TickerType: {
			`{"v":1,"running":true,"period_ms":100,"policy":"Sometimes","max_catch_up":0,"count":0,"last":0,"gap_or_repeat":false}`,
			`{"v":1,"running":true,"period_ms":-1,"policy":"Skip","max_catch_up":0,"count":0,"last":0,"gap_or_repeat":false}`,
		},
	}
	for typ, bad := range perType {
		for _, s := range append(bad, garbage...) {
			if err := newObject(t, typ).Restore([]byte(s)); !errors.Is(err, errCorrupt) {
				t.Errorf("%s.Restore(%q) = %v, want ErrCorruptState", typ, s, err)
			}
		}
	}
	// A blob is any bytes; only the size is bounded (not tested here: it
	// would allocate 512 MiB).
	if err := newObject(t, BlobType).Restore([]byte("garbage")); err != nil {
		t.Fatal(err)
	}
}

func TestRegisterTypes(t *testing.T) {
	r := actor.NewRegistry()
	must(t, Register(r))
	for _, name := range []string{CounterType, RegisterType, ListType, BankType, BlobType, TickerType} {
		ty, err := r.Lookup(name)
		if err != nil || ty.New == nil || ty.Durable {
			t.Errorf("%s: %+v %v", name, ty, err)
		}
		snap, err := ty.New().Snapshot()
		if err != nil || ty.MaxStateBytes != 0 && len(snap) > ty.MaxStateBytes {
			t.Errorf("%s: initial snapshot: %v", name, err)
		}
	}
	if err := Register(r); !errors.Is(err, actor.ErrDuplicateType) {
		t.Fatalf("second Register = %v", err)
	}
	if _, ok := newObject(t, TickerType).(actor.TimerObject); !ok {
		t.Fatal("ticker is not a TimerObject")
	}
}

// Handlers are deterministic: the same calls on two instances give the
// same replies and the same snapshots.
func TestDeterministic(t *testing.T) {
	script := map[string][]call{
		CounterType:  {c("add", "4"), c("add", "-1")},
		RegisterType: {c("put", "v"), c("cas", "v", "w")},
		ListType:     {c("append", "a"), c("append", "b")},
		BankType:     {c("transfer", "a3", "a4", "7", "x1"), c("transfer", "a4", "a5", "107", "x2")},
		BlobType:     {c("fill", "4096", "k")},
	}
	for typ, calls := range script {
		var snaps [2][]byte
		var replies [2]string
		for i := range 2 {
			obj, ctx := newObject(t, typ), newFakeContext(typ)
			for _, cl := range calls {
				b, err := obj.Handle(ctx, cl.method, args(cl.args))
				must(t, err)
				replies[i] += string(b)
			}
			snaps[i], _ = obj.Snapshot()
		}
		if replies[0] != replies[1] || !bytes.Equal(snaps[0], snaps[1]) {
			t.Errorf("%s is not deterministic", typ)
		}
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func BenchmarkBlobFill(b *testing.B) {
	const size = 64 << 20
	b.SetBytes(size)
	for b.Loop() {
		BlobContent(size, "bench")
	}
}

// Every type lists its methods (actor.Type.Methods), so a node refuses an
// unknown method before it activates anything; the list is exactly what
// Handle accepts: a listed method is never ErrUnknownMethod, and a method
// that is not listed is.
func TestMethodsListed(t *testing.T) {
	for _, ty := range append(Types(), DurableTypes()...) {
		if len(ty.Methods) == 0 {
			t.Errorf("%s lists no methods", ty.Name)
		}
		for _, m := range append(slices.Clone(ty.Methods), "nope", "") {
			_, err := ty.New().Handle(newFakeContext(ty.Name), m, nil)
			if unknown := errors.Is(err, actor.ErrUnknownMethod); unknown == ty.HasMethod(m) {
				t.Errorf("%s.%s: listed %v, Handle says %v", ty.Name, m, ty.HasMethod(m), err)
			}
		}
	}
}

// The counter's reply is what encoding/json writes for {"value": v}.
func TestCounterValueReplyIsJSON(t *testing.T) {
	for _, v := range []int64{0, 1, -1, 42, math.MaxInt64, math.MinInt64} {
		got, _ := valueReply(v)
		want, err := json.Marshal(struct {
			Value int64 `json:"value"`
		}{v})
		if err != nil || string(got) != string(want) {
			t.Errorf("valueReply(%d) = %s, want %s (%v)", v, got, want, err)
		}
	}
}
