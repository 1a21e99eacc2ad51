package lease

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/meshloc/meshloc/pkg/keyspace"
)

// FuzzDecodeDescriptor: DecodeDescriptor of any owners/<id> value never
// panics and refuses with ErrInvalidDescriptor; an accepted descriptor
// names a valid owner id, and its Encode decodes to the same descriptor
// and encodes to the same bytes again.
//
//	go test -run '^$' -fuzz '^FuzzDecodeDescriptor$' -fuzztime 1m ./pkg/lease/
func FuzzDecodeDescriptor(f *testing.F) {
	full := Descriptor{
		OwnerID: "n1", RoutingID: strings.Repeat("0f", 16), Address: "127.0.0.1:7100", State: StateServing,
		Weight: 3, ApplicationVersion: "v1", Types: []string{"counter", "dbank"}, StartedUnixMs: 1_700_000_000_000, HTTP: "127.0.0.1:7101",
	}
	for _, d := range []Descriptor{full, {OwnerID: "n2", Types: []string{}}, {OwnerID: "n3", State: StateDraining, Weight: -1}} {
		f.Add(d.Encode())
	}
	for _, s := range []string{
		"", "null", "{}", "[]", `"n1"`, `{"ownerId":""}`, `{"ownerId":"a/b"}`, `{"ownerId":"n1"} x`, `{"ownerId":"n1","weight":1e3}`,
		`{"ownerId":"n1","weight":9223372036854775808}`, `{"OWNERID":"n1"}`, `{"ownerId":"n1","ownerId":"n2"}`,
		"{\"ownerId\":\"n1\",\"address\":\"\xff\"}", `{"ownerId":"n1","types":null}`, `{"ownerId":"n1","unknown":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeDescriptor(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidDescriptor) {
				t.Fatalf("%q: untyped error %v", b, err)
			}
			if !reflect.DeepEqual(d, Descriptor{}) {
				t.Fatalf("%q: refused but returned %+v", b, d)
			}
			return
		}
		if err := keyspace.ValidateOwnerID(d.OwnerID); err != nil {
			t.Fatalf("%q accepted as %+v: %v", b, d, err)
		}
		enc := d.Encode()
		again, err := DecodeDescriptor(enc)
		if err != nil || !reflect.DeepEqual(again, d) {
			t.Fatalf("%q → %+v → %s → %+v %v", b, d, enc, again, err)
		}
		if enc2 := again.Encode(); !bytes.Equal(enc2, enc) {
			t.Fatalf("Encode is not stable: %s, then %s", enc, enc2)
		}
	})
}
