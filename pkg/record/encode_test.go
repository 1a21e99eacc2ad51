package record

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzEncodeMatchesStd: Encode writes exactly encoding/json's bytes for
// any record, whatever its strings hold: those bytes are compared in
// every commit and read-back, also against records older versions wrote.
func FuzzEncodeMatchesStd(f *testing.F) {
	f.Add("actor", "counter", int64(1), int64(2), "n1", int64(7), "0123456789abcdef0123456789abcdef", "127.0.0.1:7101", "active",
		false, "", "", int64(0), "", "", int64(0), "", "", "", false, "", int64(0), int64(0))
	f.Add("actor", "blob", int64(3), int64(17), "node-1", int64(12345), "rid", "[::1]:40123", "relocating",
		true, "0190c1de-1111-7222-8333-444455556666", "node-2", int64(12399), "fedcba98", "127.0.0.1:40124", int64(1764460000000), "ab12",
		"group/g1", "", false, "0190c1de-1111-7222-8333-444455556665", int64(0), int64(0))
	f.Add("group", "", int64(-2), int64(0), "é\"\\\u2028<>&", int64(-1), "\x00\x1f\x7f", "\xff\xfe", "sleeping",
		true, "", "", int64(0), "", "", int64(0), "", "", "actor/counter/a,actor/counter/b,\u2029", true, "", int64(9), int64(-5))
	f.Fuzz(func(t *testing.T, kind, typ string, og, ag int64, oid string, ogen int64, rid, addr, state string,
		intent bool, irid, tid string, tgen int64, trid, taddr string, dl int64, nh, group, members string, pinned bool,
		last string, del, delAt int64) {
		r := Record{Kind: kind, Type: typ, ObjectGeneration: og, AuthorityGeneration: ag, Owner: OwnerRef{ID: oid, Generation: ogen},
			Node: NodeRef{RoutingID: rid, Address: addr}, State: State(state), Group: group, Pinned: pinned, LastRelocation: last,
			Deleted: del, DeletedAtMs: delAt}
		if intent {
			r.Intent = &Intent{RelocationID: irid, Target: OwnerRef{ID: tid, Generation: tgen}, TargetNode: NodeRef{RoutingID: trid, Address: taddr},
				DeadlineMs: dl, NonceHash: nh}
		}
		if members != "" {
			r.Members = strings.Split(members, ",")
		} else if pinned {
			r.Members = []string{} // empty, not nil: omitted all the same
		}
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Encode(); !bytes.Equal(got, want) {
			t.Fatalf("Encode:\n%s\nencoding/json:\n%s", got, want)
		}
	})
}

func TestEncodeMatchesStd(t *testing.T) {
	for _, r := range sampleRecords() {
		want, _ := json.Marshal(&r)
		if got := r.Encode(); !bytes.Equal(got, want) {
			t.Fatalf("Encode:\n%s\nencoding/json:\n%s", got, want)
		}
	}
}

func BenchmarkEncodeRecord(b *testing.B) {
	r := sampleRecords()[1]
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Encode()
	}
}

func BenchmarkEncodeRecordStd(b *testing.B) {
	r := sampleRecords()[1]
	b.ReportAllocs()
	for b.Loop() {
		_, _ = json.Marshal(&r)
	}
}
