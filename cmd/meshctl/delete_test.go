package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meshloc/meshloc/pkg/api"
)

// TestDelete: meshctl delete sends DELETE /v1/objects/OBJECT and prints the
// answer; a refusal is its code on stderr and exit status 1; a bad name is
// refused before anything is sent.
func TestDelete(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/objects/actor/dcounter/c1":
			_ = json.NewEncoder(w).Encode(api.Deleted{Object: "actor/dcounter/c1", ObjectGeneration: 3, Owner: "n1@7", Revision: 42})
		default:
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: &api.Error{Code: api.CodeConflict, Message: "authority: object cannot be deleted: group/g1 is a group"}})
		}
	}))
	defer srv.Close()
	run := func(args ...string) result { return meshctl(nil, append([]string{"--locationd", srv.URL}, args...)...) }

	if r := run("delete", "actor/dcounter/c1"); r.code != 0 || r.stdout != "deleted actor/dcounter/c1 generation 3 (owner n1@7)\n" {
		t.Fatalf("delete: %+v", r)
	}
	if r := run("-o", "json", "delete", "actor/dcounter/c1"); r.code != 0 || !strings.Contains(r.stdout, `"objectGeneration": 3`) {
		t.Fatalf("delete -o json: %+v", r)
	}
	if r := run("delete", "group/g1"); r.code != 1 || !strings.Contains(r.stderr, "conflict") {
		t.Fatalf("delete of a group: %+v", r)
	}
	n := len(got)
	if r := run("delete", "actor/dcounter"); r.code == 0 || len(got) != n {
		t.Fatalf("a bad name: %+v (sent %v)", r, got[n:])
	}
	if got[0] != "DELETE /v1/objects/actor/dcounter/c1" {
		t.Fatalf("requests %v", got)
	}
}
