package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/meshloc/meshloc/pkg/api"
)

// fakeGroups answers the group routes like locationd, and records the
// bodies it got.
type fakeGroups struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []string
}

func newFakeGroups(t *testing.T) *fakeGroups {
	f := &fakeGroups{}
	write := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	post := func(w http.ResponseWriter, r *http.Request) api.GroupRequest {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.bodies = append(f.bodies, r.URL.Path+" "+string(b))
		f.mu.Unlock()
		var req api.GroupRequest
		_ = json.Unmarshal(b, &req)
		return req
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/groups", func(w http.ResponseWriter, r *http.Request) {
		req := post(w, r)
		if req.Group == "group/taken" {
			write(w, 409, api.ErrorBody{Error: &api.Error{Code: api.CodeConflict, Message: "locationd: conflict: node n1: node: group exists: group/taken, owned by n1@7"}})
			return
		}
		write(w, 200, api.Group{Group: req.Group, Owner: req.On + "@7", Members: []string{}, StoreVersion: 5})
	})
	mux.HandleFunc("POST /v1/groups/join", func(w http.ResponseWriter, r *http.Request) {
		req := post(w, r)
		switch req.Actor {
		case "actor/counter/full":
			write(w, 409, api.ErrorBody{Error: &api.Error{Code: api.CodeConflict, Message: "locationd: conflict: node n1@7: authority: group/g1 would have 127 members, at most 126 fit: … --max-txn-ops=128 …"}})
		case "actor/counter/far":
			rel := inflight
			rel.Object, rel.Role, rel.Phase = req.Actor, "source", "cutover"
			write(w, 200, api.Group{Group: req.Group, Owner: "n2@11", Members: []string{"actor/counter/far"}, Relocation: &rel})
		default:
			write(w, 200, api.Group{Group: req.Group, Owner: "n1@7", Members: []string{req.Actor}, StoreVersion: 9})
		}
	})
	mux.HandleFunc("POST /v1/groups/leave", func(w http.ResponseWriter, r *http.Request) {
		req := post(w, r)
		write(w, 200, api.Group{Group: req.Group, Owner: "n1@7", Members: []string{}, StoreVersion: 10})
	})
	mux.HandleFunc("GET /v1/groups/{group...}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("group") != "group/g1" {
			write(w, 404, api.ErrorBody{Error: &api.Error{Code: api.CodeNotFound, Message: "authority: object not found: " + r.PathValue("group")}})
			return
		}
		write(w, 200, api.Group{Group: "group/g1", Owner: "n1@7", Members: []string{"actor/counter/a", "actor/counter/b"}, StoreVersion: 9, OwnerAlive: true, Revision: 12})
	})
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

func (f *fakeGroups) run(args ...string) result {
	return meshctl(nil, append([]string{"--locationd", f.URL}, args...)...)
}

func TestGroupCommands(t *testing.T) {
	f := newFakeGroups(t)
	for _, tc := range []struct {
		args []string
		want []string // substrings of stdout
	}{
		{[]string{"group", "create", "group/g1", "--on", "n1"}, []string{"GROUP", "group/g1", "OWNER", "n1@7", "MEMBERS", "0"}},
		{[]string{"group", "join", "group/g1", "actor/counter/c1"}, []string{"MEMBERS", "1", "actor/counter/c1"}},
		{[]string{"group", "join", "group/g1", "actor/counter/far"}, []string{"n2@11", "RELOCATION", inflight.RelocationID, "cutover at the answer"}},
		{[]string{"group", "leave", "group/g1", "actor/counter/c1"}, []string{"MEMBERS", "0", "STORE-VERSION", "10"}},
		{[]string{"group", "members", "group/g1"}, []string{"actor/counter/a", "actor/counter/b", "OWNER-ALIVE", "yes"}},
	} {
		r := f.run(tc.args...)
		if r.code != 0 || r.stderr != "" {
			t.Errorf("meshctl %v: exit %d, stderr %q", tc.args, r.code, r.stderr)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("meshctl %v: stdout lacks %q:\n%s", tc.args, w, r.stdout)
			}
		}
	}
	f.mu.Lock()
	bodies := strings.Join(f.bodies, "\n")
	f.mu.Unlock()
	for _, w := range []string{`/v1/groups {"group":"group/g1","on":"n1"}`, `/v1/groups/join {"group":"group/g1","actor":"actor/counter/c1"}`, `/v1/groups/leave {"group":"group/g1","actor":"actor/counter/c1"}`} {
		if !strings.Contains(bodies, w) {
			t.Errorf("locationd did not get %s; got:\n%s", w, bodies)
		}
	}
	// JSON is the API's.
	r := f.run("-o", "json", "group", "members", "group/g1")
	var g api.Group
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &g) != nil || len(g.Members) != 2 {
		t.Errorf("json: %+v", r)
	}
	// Errors: one typed line; usage errors exit 2.
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"group", "create", "group/taken"}, 1, "meshctl: conflict: node n1: node: group exists: group/taken, owned by n1@7"},
		{[]string{"group", "join", "group/g1", "actor/counter/full"}, 1, "meshctl: conflict: node n1@7: authority: group/g1 would have 127 members, at most 126 fit: … --max-txn-ops=128 …"},
		{[]string{"group", "members", "group/nope"}, 1, "meshctl: not_found: authority: object not found: group/nope"},
		{[]string{"group"}, 2, "meshctl: usage: a group command is required: create, join, leave or members (see meshctl --help)"},
		{[]string{"group", "join", "group/g1"}, 2, "meshctl: usage: meshctl group join: accepts 2 arg(s), received 1 (see meshctl --help)"},
		{[]string{"group", "members", "actor/counter/a"}, 2, `meshctl: invalid_argument: GROUP: "actor/counter/a" is not a group (want group/<id>)`},
	} {
		r := f.run(tc.args...)
		if r.code != tc.code || strings.TrimSpace(r.stderr) != tc.stderr {
			t.Errorf("meshctl %v: exit %d, stderr %q; want %d, %q", tc.args, r.code, r.stderr, tc.code, tc.stderr)
		}
	}
}
