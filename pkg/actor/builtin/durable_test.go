package builtin

import (
	"testing"

	"github.com/meshloc/meshloc/pkg/actor"
)

// Every built-in type has a durable variant with the same logic, registered
// by Register next to the memory one.
func TestDurableVariants(t *testing.T) {
	r := actor.NewRegistry()
	must(t, Register(r))
	for _, mem := range Types() {
		name := DurablePrefix + mem.Name
		d, err := r.Lookup(name)
		if err != nil || !d.Durable || d.MaxStateBytes != mem.MaxStateBytes {
			t.Errorf("%s: %+v %v", name, d, err)
			continue
		}
		if !IsDurable(name) || IsDurable(mem.Name) {
			t.Errorf("IsDurable(%s)=%v IsDurable(%s)=%v", name, IsDurable(name), mem.Name, IsDurable(mem.Name))
		}
		a, _ := d.New().Snapshot()
		b, _ := mem.New().Snapshot()
		if string(a) != string(b) {
			t.Errorf("%s starts as %s, %s as %s", name, a, mem.Name, b)
		}
	}
	for _, name := range []string{DurableCounterType, DurableRegisterType, DurableListType, DurableBankType, DurableBlobType, DurableTickerType} {
		if _, err := r.Lookup(name); err != nil {
			t.Error(err)
		}
	}
	if IsDurable("d") || IsDurable("dnothing") || IsDurable("") {
		t.Error("IsDurable of a name that is no built-in")
	}
}
