package record

import (
	"encoding/json"
	"reflect"
	"testing"
)

func sampleRecords() []Record {
	return []Record{
		{Kind: "actor", Type: "counter", ObjectGeneration: 1, AuthorityGeneration: 1, Owner: OwnerRef{ID: "n1", Generation: 7}, Node: NodeRef{RoutingID: "0123456789abcdef0123456789abcdef", Address: "127.0.0.1:7101"}, State: StateActive},
		{Kind: "actor", Type: "blob", ObjectGeneration: 3, AuthorityGeneration: 17, Owner: OwnerRef{ID: "node-1", Generation: 12345}, Node: NodeRef{RoutingID: "0123456789abcdef0123456789abcdef", Address: "[::1]:40123"},
			State: StateRelocating, Intent: &Intent{RelocationID: "0190c1de-1111-7222-8333-444455556666", Target: OwnerRef{ID: "node-2", Generation: 12399}, TargetNode: NodeRef{RoutingID: "fedcba9876543210fedcba9876543210", Address: "127.0.0.1:40124"}, DeadlineMs: 1764460000000},
			Group: "group/g1", LastRelocation: "0190c1de-1111-7222-8333-444455556665"},
		{Kind: "group", ObjectGeneration: 2, AuthorityGeneration: 4, Owner: OwnerRef{ID: "é\"\\\u2028", Generation: 1}, State: StateActive, Members: []string{"actor/counter/a", "actor/counter/b"}, Pinned: true},
	}
}

// decodeStd is DecodeRecord with encoding/json, the reference.
func decodeStd(b []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, err
	}
	return r, r.Validate()
}

// DecodeRecord (goccy/go-json) accepts exactly what encoding/json accepts
// and decodes it the same: records in etcd are JSON anyone may write with
// etcdctl.
func FuzzDecodeRecordMatchesStd(f *testing.F) {
	for _, r := range sampleRecords() {
		b := r.Encode()
		f.Add(b)
		f.Add(b[:len(b)/2])
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		ind, _ := json.MarshalIndent(m, "", "  ")
		f.Add(ind)
	}
	for _, s := range []string{`{}`, `null`, `[]`, `{"kind":"actor","kind":"group"}`, `{"KIND":"actor"}`, `{"kind":"act\u006fr"}`,
		`{"objectGeneration":1.5}`, `{"objectGeneration":"1"}`, `{"owner":null}`, `{"intent":{}}`, `{"members":[1]}`, "{\"kind\":\"\xff\"}",
		`{"kind":"actor"} trailing`, `{"objectGeneration":9223372036854775808}`, `{"pinned":"true"}`, `{"unknown":{"deep":[1,2,{"x":null}]}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, werr := decodeStd(b)
		got, gerr := DecodeRecord(b)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: encoding/json %v, DecodeRecord %v", b, werr, gerr)
		}
		if werr == nil && !reflect.DeepEqual(want, got) {
			t.Fatalf("%q: encoding/json %+v, DecodeRecord %+v", b, want, got)
		}
	})
}

func TestDecodeRecordRoundTrip(t *testing.T) {
	for _, r := range sampleRecords() {
		got, err := DecodeRecord(r.Encode())
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("%+v: %v %+v", r, err, got)
		}
	}
}

func BenchmarkDecodeRecord(b *testing.B) {
	buf := sampleRecords()[1].Encode()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeRecord(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeRecordStd(b *testing.B) {
	buf := sampleRecords()[1].Encode()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeStd(buf); err != nil {
			b.Fatal(err)
		}
	}
}
