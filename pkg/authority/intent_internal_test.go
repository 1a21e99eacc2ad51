package authority

import (
	"encoding/json"
	"testing"
)

// TestRelocationIntentKeys: the value of relocations/<id> uses the
// camelCase keys of every other value meshloc keeps in etcd.
func TestRelocationIntentKeys(t *testing.T) {
	b, err := json.Marshal(relocationIntent{Object: "actor/counter/c1", Source: OwnerRef{ID: "n1", Generation: 3},
		Intent: Intent{RelocationID: "r", Target: OwnerRef{ID: "n2", Generation: 4}}, Phase: "prepared"})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"object", "source", "relocationId", "target", "targetNode", "deadlineUnixMs", "phase"} {
		if _, ok := m[k]; !ok {
			t.Errorf("key %q missing in %s", k, b)
		}
	}
	for k := range m {
		if k[0] < 'a' || k[0] > 'z' {
			t.Errorf("key %q is not camelCase in %s", k, b)
		}
	}
}
