package hosted

import (
	"testing"

	"github.com/meshloc/meshloc/pkg/wire"
)

// A pending reply route is claimed only by its own request and a relayer
// may allows: another operation id, an empty one, or a relayer refused
// all leave it pending and learn nothing (not terminal); once claimed,
// only its own request hears that it was answered.
func TestPendingRoutesClaim(t *testing.T) {
	p := NewRoutes()
	w := &Work{Op: wire.NewOperationID(), Relayer: "n2"}
	route := p.Add(w)
	other := wire.NewOperationID()
	anyone := func(*Work) bool { return true }
	for name, try := range map[string]func() (*Work, bool){
		"another request": func() (*Work, bool) { return p.Claim(route, other[:], anyone) },
		"an empty id":     func() (*Work, bool) { return p.Claim(route, nil, anyone) },
		"another relayer": func() (*Work, bool) {
			return p.Claim(route, w.Op[:], func(w *Work) bool { return w.Relayer == "n3" })
		},
		"an unknown route": func() (*Work, bool) { return p.Claim(route+1, w.Op[:], anyone) },
	} {
		if got, terminal := try(); got != nil || terminal {
			t.Fatalf("%s: claimed %v, terminal %v", name, got, terminal)
		}
	}
	if got, _ := p.Claim(route, w.Op[:], anyone); got != w {
		t.Fatal("its own request did not claim the route")
	}
	if _, terminal := p.Claim(route, w.Op[:], anyone); !terminal {
		t.Fatal("its own request does not hear the route was answered")
	}
	if got, terminal := p.Claim(route, other[:], anyone); got != nil || terminal {
		t.Fatalf("another request hears of the answered route: %v %v", got, terminal)
	}
}
