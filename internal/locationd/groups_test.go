package locationd

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/client"
)

// The group routes end to end: create on a named node, join (an actor with
// no record, an actor on the same node, an actor on another node: Actor
// Join), members, relocate the group through POST /v1/relocations, leave;
// bad input is typed and changes nothing.
func TestGroupsThroughAPI(t *testing.T) {
	m := startMesh(t, 2)
	ctx := context.Background()
	lc := m.ld.api
	n1, n2 := m.nodes[0], m.nodes[1]
	g, _, err := lc.CreateGroup(ctx, api.GroupRequest{Group: "group/g1", On: "n1"})
	if err != nil || g.Owner != n1.Self().String() {
		t.Fatalf("create: %v %+v", err, g)
	}
	// An actor with no record: created on the group's node as a member.
	if g, _, err = lc.JoinGroup(ctx, api.GroupRequest{Group: "group/g1", Actor: "actor/counter/new"}); err != nil || g.Relocation != nil || len(g.Members) != 1 {
		t.Fatalf("join new: %v %+v", err, g)
	}
	// An actor on n2: Actor Join, answered at READY with its relocation.
	cl, err := client.New(ctx, client.Config{Etcd: m.etcd})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var far string
	for _, name := range []string{"actor/counter/x1", "actor/counter/x2", "actor/counter/x3", "actor/counter/x4", "actor/counter/x5", "actor/counter/x6"} {
		counterValue(t, cl, name, "add", "3")
		if m.owner(t, name) == n2.Self() {
			far = name
			break
		}
	}
	if far == "" {
		t.Skip("placement put no actor on n2")
	}
	g, _, err = lc.JoinGroup(ctx, api.GroupRequest{Group: "group/g1", Actor: far, TimeoutMs: 10000})
	if err != nil || g.Relocation == nil || g.Relocation.Role != "source" || g.Owner != n1.Self().String() {
		t.Fatalf("actor join: %v %+v", err, g)
	}
	deadline := time.Now().Add(20 * time.Second)
	for m.owner(t, far) != n1.Self() {
		if time.Now().After(deadline) {
			t.Fatalf("%s not moved to the group's node", far)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v := counterValue(t, cl, far, "get"); v != 3 {
		t.Fatalf("%s after the join: %d", far, v)
	}
	g, _, err = lc.Group(ctx, "group/g1")
	if err != nil || !g.OwnerAlive || !slices.Equal(g.Members, []string{"actor/counter/new", far}) {
		t.Fatalf("members: %v %+v", err, g)
	}
	// The group moves as one: POST /v1/relocations.
	r, _, err := lc.Relocate(ctx, api.RelocateRequest{Object: "group/g1", Target: "n2"})
	if err != nil || r.Outcome != api.OutcomeCompleted {
		t.Fatalf("relocate the group: %v %+v", err, r)
	}
	for _, o := range []string{"group/g1", "actor/counter/new", far} {
		if m.owner(t, o) != n2.Self() {
			t.Errorf("%s not on n2 after the group moved", o)
		}
	}
	if v := counterValue(t, cl, far, "get"); v != 3 {
		t.Fatalf("%s after the group moved: %d", far, v)
	}
	// A member alone: conflict.
	if _, _, err := lc.Relocate(ctx, api.RelocateRequest{Object: far}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("relocate a member alone: %v", err)
	}
	// Leave (to the group's owner, n2 now).
	if g, _, err = lc.LeaveGroup(ctx, api.GroupRequest{Group: "group/g1", Actor: far}); err != nil || len(g.Members) != 1 {
		t.Fatalf("leave: %v %+v", err, g)
	}

	// Refusals.
	before, _, _ := lc.Group(ctx, "group/g1")
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"create twice", func() error { _, _, err := lc.CreateGroup(ctx, api.GroupRequest{Group: "group/g1"}); return err }, api.ErrConflict},
		{"create on an unknown node", func() error {
			_, _, err := lc.CreateGroup(ctx, api.GroupRequest{Group: "group/g9", On: "n9"})
			return err
		}, api.ErrNotFound},
		{"join twice", func() error {
			_, _, err := lc.JoinGroup(ctx, api.GroupRequest{Group: "group/g1", Actor: "actor/counter/new"})
			return err
		}, api.ErrConflict},
		{"join a missing group", func() error {
			_, _, err := lc.JoinGroup(ctx, api.GroupRequest{Group: "group/none", Actor: "actor/counter/z"})
			return err
		}, api.ErrNotFound},
		{"create with a timeout", func() error {
			_, _, err := lc.CreateGroup(ctx, api.GroupRequest{Group: "group/g8", TimeoutMs: 1000})
			return err
		}, api.ErrInvalidArgument},
		{"leave with a timeout", func() error {
			_, _, err := lc.LeaveGroup(ctx, api.GroupRequest{Group: "group/g1", Actor: "actor/counter/new", TimeoutMs: 1000})
			return err
		}, api.ErrInvalidArgument},
		{"join a group", func() error {
			_, _, err := lc.JoinGroup(ctx, api.GroupRequest{Group: "group/g1", Actor: "group/g2"})
			return err
		}, api.ErrInvalidArgument},
		{"leave a non-member", func() error {
			_, _, err := lc.LeaveGroup(ctx, api.GroupRequest{Group: "group/g1", Actor: far})
			return err
		}, api.ErrConflict},
		{"members of an actor", func() error { _, _, err := lc.Group(ctx, "actor/counter/new"); return err }, api.ErrInvalidArgument},
	} {
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodGet, "/v1/groups/join", ""},
		{http.MethodPost, "/v1/groups/join", `{"group":"group/g1","actor":"actor/counter/q","bogus":1}`},
		{http.MethodPost, "/v1/groups/join", ``},
	} {
		req, _ := http.NewRequest(tc.method, m.ld.base+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed && resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s %s %s: %d", tc.method, tc.path, tc.body, resp.StatusCode)
		}
	}
	if after, _, _ := lc.Group(ctx, "group/g1"); after.StoreVersion != before.StoreVersion {
		t.Fatal("a refused request wrote the group")
	}
}
