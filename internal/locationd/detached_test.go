package locationd

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/wire"
)

// Relocations as resources: POST with "wait": false answers 202 at once,
// in flight, with the relocation's id; GET /v1/relocations/{id} follows it
// to its outcome — one that completes, and one that aborts (its target
// drains: it refuses the PREPARE, the source keeps the object).
func TestRelocateDetached(t *testing.T) {
	m := startMesh(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Etcd: m.etcd, Locationd: m.ld.base})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const obj = "actor/counter/d1"
	if v := counterValue(t, cl, obj, "add", "1"); v != 1 {
		t.Fatalf("add: %d", v)
	}
	src := m.owner(t, obj)

	// The raw answer: 202 Accepted, in flight.
	status, body := post(t, m.ld.base, "", `{"object":"`+obj+`","wait":false}`)
	if status != http.StatusAccepted {
		t.Fatalf("POST wait=false: %d %s", status, body)
	}
	rels, err := cl.Relocations(ctx, api.RelocationsQuery{Object: obj})
	if err != nil || len(rels.Relocations) == 0 {
		t.Fatalf("relocations: %v %v", rels, err)
	}
	id := rels.Relocations[0].RelocationID
	done, err := cl.Wait(ctx, id)
	if err != nil || done.Outcome != api.OutcomeCompleted || done.Role != "source" || done.RelocationID != id {
		t.Fatalf("wait %s: %+v %v", id, done, err)
	}
	dst := m.owner(t, obj)
	if dst == src {
		t.Fatalf("still owned by %s", src)
	}
	if v := counterValue(t, cl, obj, "add", "1"); v != 2 {
		t.Fatalf("add after the move: %d", v)
	}

	// One that aborts: the target drains (its descriptor still says
	// serving, so the source picks it; it refuses the PREPARE).
	target := m.nodeOf(t, src)
	target.SetDraining(true)
	defer target.SetDraining(false)
	id, err = cl.Relocate(ctx, obj, client.RelocateOptions{Target: src.ID, Detach: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wire.ParseRelocationID(id); err != nil {
		t.Fatalf("Relocate answered id %q: %v", id, err)
	}
	r, err := cl.Relocation(ctx, id)
	if err != nil || r.RelocationID != id {
		t.Fatalf("relocation %s at once: %+v %v", id, r, err)
	}
	done, err = cl.Wait(ctx, id)
	if err != nil || done.Outcome != api.OutcomeAborted || done.Code != "shutting_down" {
		t.Fatalf("wait %s: %+v %v, want aborted shutting_down", id, done, err)
	}
	if o := m.owner(t, obj); o != dst {
		t.Fatalf("owner %s after the aborted relocation, want %s", o, dst)
	}
	if v := counterValue(t, cl, obj, "add", "1"); v != 3 {
		t.Fatalf("add after the abort: %d", v)
	}

	// Unknown and malformed ids.
	if _, err := cl.Relocation(ctx, wire.NewRelocationID().String()); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("unknown id: %v, want not_found", err)
	}
	for _, bad := range []string{"x", "../owners", "00000000-0000-0000-0000-000000000000"} {
		if _, err := cl.Relocation(ctx, bad); !errors.Is(err, api.ErrInvalidArgument) {
			t.Errorf("id %q: %v, want invalid_argument", bad, err)
		}
	}
	if _, err := m.ld.api.Raw(ctx, "/v1/relocations/not-a-uuid", nil); !errors.Is(err, api.ErrInvalidArgument) {
		t.Errorf("GET /v1/relocations/not-a-uuid: %v, want invalid_argument", err)
	}
}
