package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/authority"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeLocationd answers like locationd, from canned values, and records the
// queries it got.
type fakeLocationd struct {
	*httptest.Server
	mu      sync.Mutex
	queries []string
}

func newFake(t *testing.T) *fakeLocationd {
	f := &fakeLocationd{}
	rec := authority.Record{
		Kind: "actor", Type: "counter", ObjectGeneration: 1, AuthorityGeneration: 3,
		Owner: authority.OwnerRef{ID: "n1", Generation: 7},
		Node:  authority.NodeRef{RoutingID: "0123456789abcdef0123456789abcdef", Address: "127.0.0.1:7100"},
		State: authority.StateActive,
	}
	mux := http.NewServeMux()
	write := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /v1/owners", func(w http.ResponseWriter, r *http.Request) {
		write(w, 200, api.OwnersResponse{Revision: 12, Owners: []api.Owner{
			{ID: "n1", Generation: 7, RoutingID: "0123456789abcdef0123456789abcdef", Address: "127.0.0.1:7100", State: "serving",
				Weight: 1, ApplicationVersion: "v1", Types: []string{"counter", "bank"}, Started: "2023-11-14T22:13:20.000Z", LeaseID: "694d8f0f3f5b2a05"},
			{ID: "node-two", Generation: 11, Address: "127.0.0.1:7200", State: "draining", Types: []string{}},
		}})
	})
	mux.HandleFunc("GET /v1/objects", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.queries = append(f.queries, r.URL.RawQuery)
		f.mu.Unlock()
		if r.URL.Query().Get("owner") == "refused" {
			write(w, 400, api.ErrorBody{Error: &api.Error{Code: api.CodeInvalidArgument, Message: `locationd: invalid argument: owner "refused"`}})
			return
		}
		resp := api.ObjectsResponse{Revision: 12, Objects: []api.Object{
			{Object: "actor/counter/c1", Record: rec, StoreVersion: 9, OwnerAlive: true},
			{Object: "actor/counter/long-name-2", Record: rec, StoreVersion: 10, OwnerAlive: false},
		}}
		if r.URL.Query().Get("limit") == "1" {
			resp.Objects, resp.Next = resp.Objects[:1], "actor/counter/c1"
		}
		write(w, 200, resp)
	})
	mux.HandleFunc("GET /v1/objects/{object...}", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("object") {
		case "actor/counter/c1":
			write(w, 200, api.ObjectResponse{Object: api.Object{Object: "actor/counter/c1", Record: rec, StoreVersion: 9, OwnerAlive: true}, Revision: 12})
		case "actor/counter/down":
			http.Error(w, "upstream\nconnect error", http.StatusServiceUnavailable)
		default:
			write(w, 404, api.ErrorBody{Error: &api.Error{Code: api.CodeNotFound, Message: "authority: object not found: " + r.PathValue("object")}})
		}
	})
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

type result struct {
	code           int
	stdout, stderr string
}

func meshctl(env map[string]string, args ...string) result {
	var out, errb bytes.Buffer
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	code := run(context.Background(), args, &out, &errb, lookup)
	return result{code, out.String(), errb.String()}
}

func (f *fakeLocationd) run(args ...string) result {
	return meshctl(nil, append([]string{"--locationd", f.URL}, args...)...)
}

func TestTables(t *testing.T) {
	f := newFake(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"owners"}, `
ID        GENERATION  STATE     ADDRESS         WEIGHT  VERSION  TYPES         STARTED                   LEASE             ROUTING-ID
n1        7           serving   127.0.0.1:7100  1       v1       counter,bank  2023-11-14T22:13:20.000Z  694d8f0f3f5b2a05  0123456789abcdef0123456789abcdef
node-two  11          draining  127.0.0.1:7200  0       -        -             -                         -                 -
`},
		{[]string{"objects"}, `
OBJECT                     OWNER  ALIVE  STATE   OBJECT-GEN  AUTHORITY-GEN  STORE-VERSION  ADDRESS
actor/counter/c1           n1@7   yes    active  1           3              9              127.0.0.1:7100
actor/counter/long-name-2  n1@7   no     active  1           3              10             127.0.0.1:7100
`},
		{[]string{"get", "actor/counter/c1"}, `
OBJECT         actor/counter/c1
OWNER          n1@7
OWNER-ALIVE    yes
STATE          active
OBJECT-GEN     1
AUTHORITY-GEN  3
STORE-VERSION  9
REVISION       12
ADDRESS        127.0.0.1:7100
ROUTING-ID     0123456789abcdef0123456789abcdef
`},
	} {
		r := f.run(tc.args...)
		if r.code != 0 || r.stderr != "" || r.stdout != strings.TrimPrefix(tc.want, "\n") {
			t.Errorf("meshctl %v: exit %d, stderr %q, stdout:\n%s\nwant:\n%s", tc.args, r.code, r.stderr, r.stdout, tc.want)
		}
	}
}

func TestJSON(t *testing.T) {
	f := newFake(t)
	for _, tc := range []struct {
		args []string
		path string
	}{
		{[]string{"-o", "json", "owners"}, "/v1/owners"},
		{[]string{"objects", "-o", "json"}, "/v1/objects"},
		{[]string{"--output=json", "get", "actor/counter/c1"}, "/v1/objects/actor/counter/c1"},
	} {
		r := f.run(tc.args...)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("meshctl %v: exit %d: %s", tc.args, r.code, r.stderr)
		}
		// The API's JSON as it came, indented.
		resp, err := http.Get(f.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		var raw bytes.Buffer
		_, _ = raw.ReadFrom(resp.Body)
		resp.Body.Close()
		var want bytes.Buffer
		if err := json.Indent(&want, bytes.TrimSpace(raw.Bytes()), "", "  "); err != nil {
			t.Fatal(err)
		}
		if r.stdout != want.String()+"\n" {
			t.Errorf("meshctl %v:\n%s\nwant\n%s", tc.args, r.stdout, want.String())
		}
	}
}

func TestObjectsQuery(t *testing.T) {
	f := newFake(t)
	for _, args := range [][]string{
		{"objects"},
		{"objects", "--kind", "actor", "--owner", "n1", "--orphaned"},
		{"objects", "--orphaned=false"},
		{"objects", "--contains", "w0-", "--limit", "1", "--after", "actor/counter/a"},
	} {
		r := f.run(args...)
		if r.code != 0 {
			t.Fatalf("%v: %+v", args, r)
		}
		if more := strings.Contains(r.stdout, "more objects follow: the next page is --after actor/counter/c1\n"); more != slices.Contains(args, "--limit") {
			t.Errorf("%v printed:\n%s", args, r.stdout)
		}
	}
	want := []string{"", "kind=actor&orphaned=true&owner=n1", "orphaned=false", "after=actor%2Fcounter%2Fa&contains=w0-&limit=1"}
	if fmt.Sprint(f.queries) != fmt.Sprint(want) {
		t.Errorf("queries = %q, want %q", f.queries, want)
	}
}

func TestErrors(t *testing.T) {
	f := newFake(t)
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	for _, tc := range []struct {
		env    map[string]string
		args   []string
		code   int
		stderr string // exact, or a prefix when it ends with "…"
	}{
		{nil, []string{"--locationd", f.URL, "get", "actor/counter/x"}, 1,
			"meshctl: not_found: authority: object not found: actor/counter/x"},
		// The server's invalid_argument: exit status 1, the request was made.
		{nil, []string{"--locationd", f.URL, "objects", "--owner", "refused"}, 1,
			`meshctl: invalid_argument: owner "refused"`},
		// meshctl's: exit status 2, nothing was sent.
		{nil, []string{"--locationd", f.URL, "objects", "--kind", "bad"}, 2,
			`meshctl: invalid_argument: --kind: "bad" (want actor or group)`},
		{nil, []string{"--locationd", f.URL, "get", "actor/counter/down"}, 1,
			"meshctl: unavailable: Service Unavailable: upstream connect error"},
		{nil, []string{"--locationd", closedURL, "owners"}, 1, "meshctl: unavailable: locationd " + closedURL + ": …"},
		{map[string]string{"MESHCTL_LOCATIOND": closedURL}, []string{"owners"}, 1, "meshctl: unavailable: locationd " + closedURL + ": …"},
		// The flag wins over the environment.
		{map[string]string{"MESHCTL_LOCATIOND": closedURL}, []string{"--locationd", f.URL, "get", "actor/counter/x"}, 1,
			"meshctl: not_found: authority: object not found: actor/counter/x"},
		{nil, []string{"get"}, 2, "meshctl: usage: meshctl get: accepts 1 arg(s), received 0 (see meshctl --help)"},
		{nil, []string{"get", "a", "b"}, 2, "meshctl: usage: meshctl get: accepts 1 arg(s), received 2 (see meshctl --help)"},
		{nil, []string{"owners", "--bogus"}, 2, "meshctl: usage: unknown flag: --bogus (see meshctl --help)"},
		{nil, []string{"-o", "yaml", "owners"}, 2, `meshctl: usage: -o "yaml" (want table or json) (see meshctl --help)`},
		{nil, []string{"frobnicate"}, 2, `meshctl: usage: unknown command "frobnicate" (see meshctl --help)`},
		{nil, []string{}, 2, "meshctl: usage: a subcommand is required (see meshctl --help)"},
		{nil, []string{"--locationd", "localhost:7070", "owners"}, 2, `meshctl: invalid_argument: --locationd: "localhost:7070" is not a URL like http://127.0.0.1:7070: scheme "localhost" (want http or https)`},
		{map[string]string{"MESHCTL_TIMEOUT": "soon"}, []string{"owners"}, 2, "meshctl: usage: environment MESHCTL_TIMEOUT=…"},
	} {
		r := meshctl(tc.env, tc.args...)
		line, rest, _ := strings.Cut(r.stderr, "\n")
		ok := r.code == tc.code && rest == "" && r.stdout == ""
		if p, prefix := strings.CutSuffix(tc.stderr, "…"); prefix {
			ok = ok && strings.HasPrefix(line, p)
		} else {
			ok = ok && line == tc.stderr
		}
		if !ok {
			t.Errorf("meshctl %v: exit %d, stdout %q, stderr %q; want exit %d, stderr %q", tc.args, r.code, r.stdout, r.stderr, tc.code, tc.stderr)
		}
	}
}

func TestHelpIsSuccess(t *testing.T) {
	r := meshctl(nil, "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "objects") || r.stderr != "" {
		t.Errorf("--help: %+v", r)
	}
}
