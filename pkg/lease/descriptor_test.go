package lease

import (
	"errors"
	"testing"
)

// A value that is not a descriptor naming a valid owner id is refused
// (FuzzDecodeDescriptor's first finds: null and {} decoded as an empty
// descriptor, an owner with no id, which the Directory indexed under "").
func TestDecodeDescriptorRefuses(t *testing.T) {
	for _, s := range []string{"", "null", "{}", "[]", `"n1"`, `{"ownerId":""}`, `{"ownerId":"a/b"}`, `{"ownerId":".."}`, `{"ownerId":"n1"}x`} {
		if d, err := DecodeDescriptor([]byte(s)); !errors.Is(err, ErrInvalidDescriptor) {
			t.Errorf("%q: %+v %v, want ErrInvalidDescriptor", s, d, err)
		}
	}
	d, err := DecodeDescriptor([]byte(`{"ownerId":"n1","state":"serving","weight":2,"future":true}`))
	if err != nil || d.OwnerID != "n1" || d.State != StateServing || d.Weight != 2 {
		t.Fatalf("a descriptor with a field of a newer version: %+v %v", d, err)
	}
}
