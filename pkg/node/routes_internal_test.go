package node

import (
	"testing"

	"github.com/meshloc/meshloc/pkg/wire"
)

// A pending reply route is claimed only by its own request and a relayer
// may allows: another operation id, an empty one, or a relayer refused
// all leave it pending and learn nothing (not terminal); once claimed,
// only its own request hears that it was answered.
func TestPendingRoutesClaim(t *testing.T) {
	p := newPendingRoutes()
	w := &work{op: wire.NewOperationID(), relayer: "n2"}
	route := p.add(w)
	other := wire.NewOperationID()
	anyone := func(*work) bool { return true }
	for name, try := range map[string]func() (*work, bool){
		"another request": func() (*work, bool) { return p.claim(route, other[:], anyone) },
		"an empty id":     func() (*work, bool) { return p.claim(route, nil, anyone) },
		"another relayer": func() (*work, bool) {
			return p.claim(route, w.op[:], func(w *work) bool { return w.relayer == "n3" })
		},
		"an unknown route": func() (*work, bool) { return p.claim(route+1, w.op[:], anyone) },
	} {
		if got, terminal := try(); got != nil || terminal {
			t.Fatalf("%s: claimed %v, terminal %v", name, got, terminal)
		}
	}
	if got, _ := p.claim(route, w.op[:], anyone); got != w {
		t.Fatal("its own request did not claim the route")
	}
	if _, terminal := p.claim(route, w.op[:], anyone); !terminal {
		t.Fatal("its own request does not hear the route was answered")
	}
	if got, terminal := p.claim(route, other[:], anyone); got != nil || terminal {
		t.Fatalf("another request hears of the answered route: %v %v", got, terminal)
	}
}
