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
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// TestDeleteThroughAPI: DELETE /v1/objects/{object} removes a served
// object (its owner drops it; a caller that knew it is told deleted), and
// refuses what cannot be deleted, changing nothing.
func TestDeleteThroughAPI(t *testing.T) {
	m := startMesh(t, 1)
	ctx := context.Background()
	cl, err := client.New(ctx, client.Config{Etcd: m.etcd})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const obj = "actor/dcounter/x1"
	if v := counterValue(t, cl, obj, "add", "4"); v != 4 {
		t.Fatalf("add: %d", v)
	}
	owner := m.owner(t, obj)
	d, _, err := m.ld.api.Delete(ctx, obj)
	if err != nil || d.Object != obj || d.ObjectGeneration != 1 || d.Owner != owner.String() || d.Revision == 0 {
		t.Fatalf("delete: %v %+v", err, d)
	}
	var ae *api.Error
	if _, _, err := m.ld.api.Object(ctx, obj); !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Fatalf("read after the delete: %v, want not_found", err)
	}
	if _, _, err := m.ld.api.Delete(ctx, obj); !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Fatalf("a second delete: %v, want not_found", err)
	}
	// The owner drops its copy once its watch delivers the delete; until
	// then it may still answer a read from memory (a write would fail its
	// persist): wait for that, bounded.
	var we *wire.Error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, err = cl.Call(ctx, obj, "get")
		if errors.As(err, &we) && we.Code == pb.Code_CODE_DELETED {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a caller that knew it: %v, want deleted", err)
		}
	}
	if v := counterValue(t, cl, obj, "get"); v != 0 {
		t.Fatalf("the new object: %d, want 0", v)
	}

	// Refusals: a group, a name that does not parse, a method not served.
	if _, err := m.nodes[0].CreateGroup(ctx, "group/gx"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.ld.api.Delete(ctx, "group/gx"); !errors.As(err, &ae) || ae.Code != api.CodeConflict {
		t.Fatalf("delete of a group: %v, want conflict", err)
	}
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{http.MethodDelete, "/v1/objects/actor/dcounter", http.StatusBadRequest},
		{http.MethodDelete, "/v1/objects/actor/dcounter/x1?force=1", http.StatusBadRequest},
		{http.MethodPut, "/v1/objects/actor/dcounter/x1", http.StatusMethodNotAllowed},
	} {
		req, _ := http.NewRequest(c.method, m.ld.base+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
	}
	if v := counterValue(t, cl, obj, "get"); v != 0 {
		t.Fatalf("after the refusals: %d", v)
	}
}
