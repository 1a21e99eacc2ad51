package builtin

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
)

// Fuzz targets of the built-in types' Restore (the bytes a relocation
// payload or a durable object's state/<object> key hands them) and of
// Handle on a restored object. Run one with, e.g.,
//
//	go test -run '^$' -fuzz '^FuzzRestore$' -fuzztime 1m ./pkg/actor/builtin/
//
// and keep any crasher it writes to testdata/fuzz as a regression seed.

// fuzzTypes are the memory and durable types (the durable ones share the
// memory ones' New: both are fuzzed all the same, by index).
var fuzzTypes = append(Types(), DurableTypes()...)

// readMethod is a method of each type that reads: it must succeed on any
// restored state, and leave it as it was.
var readMethod = map[string]string{
	CounterType: "get", RegisterType: "get", ListType: "read", BankType: "read", BlobType: "hash", TickerType: "read", RoomType: "history",
}

// fuzzMethods are the methods the Handle fuzzer calls, by type; the
// fuzzer may also name any other.
var fuzzMethods = map[string][]string{
	CounterType:  {"add", "get"},
	RegisterType: {"get", "put", "cas"},
	ListType:     {"append", "read"},
	BankType:     {"transfer", "read"},
	BlobType:     {"fill", "hash", "size"},
	TickerType:   {"start", "read", "stop"},
	RoomType:     {"join", "say", "history"},
}

func baseName(typ string) string {
	if IsDurable(typ) {
		return typ[len(DurablePrefix):]
	}
	return typ
}

// checkState is what must hold for any state an instance holds: its
// Snapshot fits the type's bound, restores into a fresh instance, and the
// fresh instance's Snapshot is the same bytes.
func checkState(t *testing.T, ty actor.Type, obj actor.Object) []byte {
	t.Helper()
	snap, err := obj.Snapshot()
	if err != nil {
		t.Fatalf("%s: Snapshot: %v", ty.Name, err)
	}
	if ty.MaxStateBytes > 0 && len(snap) > ty.MaxStateBytes {
		t.Fatalf("%s: snapshot of %d bytes, over its bound %d", ty.Name, len(snap), ty.MaxStateBytes)
	}
	fresh := ty.New()
	if err := fresh.Restore(bytes.Clone(snap)); err != nil {
		t.Fatalf("%s: Restore(Snapshot()) = %v\n%q", ty.Name, err, snap)
	}
	again, err := fresh.Snapshot()
	if err != nil || !bytes.Equal(again, snap) {
		t.Fatalf("%s: Snapshot → Restore → Snapshot changed the state (%v):\n%q\n%q", ty.Name, err, snap, again)
	}
	return snap
}

func seedStates(f *testing.F) map[string][][]byte {
	f.Helper()
	out := map[string][][]byte{}
	for _, ty := range Types() {
		obj := ty.New()
		ctx := newFakeContext(ty.Name)
		snap, err := obj.Snapshot()
		if err != nil {
			f.Fatal(err)
		}
		out[ty.Name] = append(out[ty.Name], snap)
		var script [][]string
		switch ty.Name {
		case CounterType:
			script = [][]string{{"add", "-9223372036854775807"}}
		case RegisterType:
			script = [][]string{{"put", "héllo \"x\" \u2028"}, {"cas", "héllo \"x\" \u2028", "<&>"}}
		case ListType:
			script = [][]string{{"append", "a"}, {"append", ""}, {"append", "\u00e9\t"}}
		case BankType:
			script = [][]string{{"transfer", "a0", "a7", "100", "t-1"}, {"transfer", "a7", "a3", "150", "x:y@z.w_v"},
				{"hop", "c0", "7"}, {"chain", "c1", "3", "actor/bank/b2", "actor/dbank/b3"}, {"hop", "c0", "5", "actor/bank/b9"}}
		case BlobType:
			script = [][]string{{"fill", "33", "seed"}}
		case TickerType:
			script = [][]string{{"start", "10", "catchup", "3"}}
		case RoomType:
			script = [][]string{{"join", "ann"}, {"join", "bo"}, {"say", "hi \"all\""}, {"say", ""}}
		}
		for _, cl := range script {
			if _, err := obj.Handle(ctx, cl[0], args(cl[1:])); err != nil {
				f.Fatalf("%s %v: %v", ty.Name, cl, err)
			}
		}
		if ty.Name == TickerType {
			if err := ctx.advance(obj, 100*time.Millisecond); err != nil {
				f.Fatal(err)
			}
		}
		if snap, err = obj.Snapshot(); err != nil {
			f.Fatal(err)
		}
		out[ty.Name] = append(out[ty.Name], snap)
	}
	return out
}

// FuzzRestore: Restore of any bytes, for every type, never panics; it
// refuses with an error wrapping actor.ErrCorruptState, or accepts a state
// whose Snapshot is exactly the bytes restored (snapshots are canonical)
// and round-trips through a fresh instance; the type's read method then
// answers, valid JSON, without changing the state.
func FuzzRestore(f *testing.F) {
	seeds := seedStates(f)
	for i, ty := range fuzzTypes {
		for _, s := range seeds[baseName(ty.Name)] {
			f.Add(uint8(i), s)
		}
	}
	for _, s := range []string{"", "null", "{}", `{"v":1}`, `{"v":1,"value":1}x`, "\xff",
		`{"v":1,"items":["\ud800"]}`, `{"v":1,"value":"\u2028","version":1}`, `{"v":1,"value":"` + "\u2028" + `","version":1}`,
		`{"v":1,"running":true,"period_ms":10,"policy":"fire-once","max_catch_up":0,"count":18446744073709551615,"last":18446744073709551615,"gap_or_repeat":false}`,
	} {
		for i := range fuzzTypes {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, state []byte) {
		ty := fuzzTypes[int(which)%len(fuzzTypes)]
		obj := ty.New()
		in := bytes.Clone(state)
		if err := obj.Restore(in); err != nil {
			if !errors.Is(err, actor.ErrCorruptState) {
				t.Fatalf("%s.Restore(%q) = %v, not ErrCorruptState", ty.Name, state, err)
			}
			return
		}
		snap := checkState(t, ty, obj)
		if !bytes.Equal(snap, state) {
			t.Fatalf("%s accepted %q, its snapshot is %q", ty.Name, state, snap)
		}
		m := readMethod[baseName(ty.Name)]
		reply, err := obj.Handle(newFakeContext(ty.Name), m, nil)
		if err != nil || !json.Valid(reply) {
			t.Fatalf("%s %s on restored %q: %q %v", ty.Name, m, state, reply, err)
		}
		if after, _ := obj.Snapshot(); !bytes.Equal(after, snap) {
			t.Fatalf("%s %s changed the state:\n%q\n%q", ty.Name, m, snap, after)
		}
	})
}

// maxFuzzBlob bounds blob fill in FuzzHandle (the type allows 512 MiB).
const maxFuzzBlob = 1 << 16

// FuzzHandle restores a state (a type's initial state if Restore refuses
// the bytes), calls one method with up to four arguments, and lets a
// second of the fake clock pass (timer ticks): no panic; a refused call is
// an ErrInvalidArgument, ErrUnknownMethod or ErrRejected and leaves the
// state as it was; an answer is valid JSON; and the state after the call
// and after the ticks restores into a fresh instance to the same snapshot.
func FuzzHandle(f *testing.F) {
	seeds := seedStates(f)
	for i, ty := range Types() {
		s := seeds[ty.Name][len(seeds[ty.Name])-1]
		for j := range fuzzMethods[ty.Name] {
			f.Add(uint8(i), s, uint8(j), "", uint8(4), []byte("a1"), []byte("a2"), []byte("5"), []byte("t9"))
		}
	}
	f.Add(uint8(0), []byte(nil), uint8(0), "", uint8(1), []byte("9223372036854775807"), []byte(nil), []byte(nil), []byte(nil))
	f.Add(uint8(1), []byte(nil), uint8(2), "", uint8(2), []byte(""), []byte("\xff"), []byte(nil), []byte(nil))
	f.Add(uint8(3), []byte(nil), uint8(0), "", uint8(4), []byte("a0"), []byte("a0"), []byte("1"), []byte("t"))
	f.Add(uint8(5), []byte(nil), uint8(0), "", uint8(3), []byte("1"), []byte("catch-up"), []byte("65536"), []byte(nil))
	f.Add(uint8(5), []byte(nil), uint8(0), "", uint8(2), []byte("31622400000"), []byte("skip"), []byte(nil), []byte(nil))
	f.Add(uint8(2), []byte(nil), uint8(9), "nope", uint8(0), []byte(nil), []byte(nil), []byte(nil), []byte(nil))
	f.Fuzz(func(t *testing.T, which uint8, state []byte, sel uint8, other string, nargs uint8, a0, a1, a2, a3 []byte) {
		ty := fuzzTypes[int(which)%len(fuzzTypes)]
		base := baseName(ty.Name)
		obj := ty.New()
		if err := obj.Restore(bytes.Clone(state)); err != nil {
			obj = ty.New()
		}
		methods := fuzzMethods[base]
		method := other
		if int(sel)%(len(methods)+1) < len(methods) {
			method = methods[int(sel)%(len(methods)+1)]
		}
		argv := [][]byte{a0, a1, a2, a3}[:int(nargs)%5]
		if base == BlobType && method == "fill" && len(argv) > 0 {
			if n, err := strconv.ParseInt(string(argv[0]), 10, 64); err == nil && n > maxFuzzBlob {
				return
			}
		}
		ctx := newFakeContext(ty.Name)
		before := checkState(t, ty, obj)
		reply, err := obj.Handle(ctx, method, argv)
		if err != nil {
			if !errors.Is(err, actor.ErrInvalidArgument) && !errors.Is(err, actor.ErrUnknownMethod) && !errors.Is(err, actor.ErrRejected) {
				t.Fatalf("%s %s %q: untyped error %v", ty.Name, method, argv, err)
			}
			if after, _ := obj.Snapshot(); !bytes.Equal(after, before) {
				t.Fatalf("%s %s %q refused (%v) but changed the state:\n%q\n%q", ty.Name, method, argv, err, before, after)
			}
		} else if !json.Valid(reply) {
			t.Fatalf("%s %s %q: reply %q is not JSON", ty.Name, method, argv, reply)
		}
		checkState(t, ty, obj)
		if _, ok := obj.(actor.TimerObject); ok {
			if err := ctx.advance(obj, time.Second); err != nil {
				t.Fatalf("%s: OnTimer: %v", ty.Name, err)
			}
			checkState(t, ty, obj)
		}
	})
}
