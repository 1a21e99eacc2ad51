package record_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/meshloc/meshloc/pkg/record"
)

func validBulk() record.BulkIntent {
	return record.BulkIntent{Kind: record.BulkIntentKind,
		Source: record.OwnerRef{ID: "n1", Generation: 3}, Target: record.OwnerRef{ID: "n2", Generation: 4},
		TargetNode: record.NodeRef{RoutingID: strings.Repeat("0", 32), Address: "n2:7100"}, DeadlineMs: 10,
		Units: []record.BulkUnit{{Object: "actor/counter/a", RelocationID: "r1", NonceHash: record.HashNonce([]byte("x")), StoreVersion: 7}}}
}

// TestDecodeBulkIntent: what is not a bulk intent is told apart from a
// malformed one, and a valid one round-trips.
func TestDecodeBulkIntent(t *testing.T) {
	b := validBulk()
	got, found, err := record.DecodeBulkIntent(b.Encode(), 8)
	if err != nil || !found || !bytes.Equal(got.Encode(), b.Encode()) {
		t.Fatalf("round trip: %+v %v %v", got, found, err)
	}
	for _, v := range []string{`{"bulk":true,"objects":3}`, `{"object":"actor/t/x","relocationId":"r"}`} {
		if _, found, err := record.DecodeBulkIntent([]byte(v), 8); found || err != nil {
			t.Errorf("%s: %v %v", v, found, err)
		}
	}
	for _, v := range []string{`[`, `{"kind":"bulk-intent"}`, `{"kind":"bulk-intent","units":[1]}`, string(b.Encode()[:20])} {
		if _, _, err := record.DecodeBulkIntent([]byte(v), 8); !errors.Is(err, record.ErrInvalidBulkIntent) {
			t.Errorf("%s: %v", v, err)
		}
	}
	if _, _, err := record.DecodeBulkIntent(b.Encode(), 0); !errors.Is(err, record.ErrInvalidBulkIntent) {
		t.Errorf("more units than allowed: %v", err)
	}
}

// FuzzDecodeBulkIntent: any bytes under relocations/ decode to a valid
// bulk intent, to "not one", or to ErrInvalidBulkIntent; never a panic,
// and what decodes re-encodes to a value that decodes the same.
func FuzzDecodeBulkIntent(f *testing.F) {
	b := validBulk()
	f.Add(b.Encode())
	f.Add([]byte(`{"bulk":true}`))
	f.Add([]byte(`{"kind":"bulk-intent","units":[{"object":"group/g"}]}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		got, found, err := record.DecodeBulkIntent(v, 16)
		switch {
		case err != nil && !errors.Is(err, record.ErrInvalidBulkIntent):
			t.Fatalf("error of another kind: %v", err)
		case err != nil || !found:
			return
		}
		if err := got.Validate(16); err != nil {
			t.Fatalf("decoded an invalid bulk intent: %v", err)
		}
		again, found, err := record.DecodeBulkIntent(got.Encode(), 16)
		if err != nil || !found || !bytes.Equal(again.Encode(), got.Encode()) {
			t.Fatalf("re-decode: %v %v", found, err)
		}
	})
}
