package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/api"
)

// recorder answers every request with a typed 404 and records what it got.
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []string // "METHOD /path Content-Type"
}

func newRecorder(t *testing.T) *recorder {
	rec := &recorder{}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
		rec.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: &api.Error{Code: api.CodeNotFound, Message: "recorded"}})
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (rec *recorder) requests() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.reqs...)
}

// Names and addresses that do not parse are usage errors (exit status 2,
// one line "meshctl: invalid_argument: ..."), refused before any request.
func TestInvalidArgumentsSendNothing(t *testing.T) {
	rec := newRecorder(t)
	const invalidName = `keyspace: invalid name: `
	for _, tc := range []struct {
		env    map[string]string
		args   []string
		stderr string // the whole line; "…" stands for any text
	}{
		// The audit's case: "../owners" named the owners route.
		{nil, []string{"get", "../owners"}, `meshctl: invalid_argument: OBJECT: ` + invalidName + `"../owners" (want actor/<type>/<id> or group/<id>)`},
		{nil, []string{"get", "actor/counter/.."}, `meshctl: invalid_argument: OBJECT: ` + invalidName + `id ".."`},
		{nil, []string{"get", "actor/counter/../c1"}, `meshctl: invalid_argument: OBJECT: ` + invalidName + `"actor/counter/../c1" …`},
		{nil, []string{"get", "actor/co unter/c1"}, `meshctl: invalid_argument: OBJECT: ` + invalidName + `type "co unter" has byte ' ' …`},
		{nil, []string{"get", ""}, `meshctl: invalid_argument: OBJECT: ` + invalidName + `"" …`},
		{nil, []string{"call", "../owners", "get"}, `meshctl: invalid_argument: OBJECT: ` + invalidName + `"../owners" …`},
		{nil, []string{"relocate", "group/../x"}, `meshctl: invalid_argument: OBJECT: ` + invalidName + `"group/../x" …`},
		{nil, []string{"relocate", "actor/counter/c1", "--to", "a/b"}, `meshctl: invalid_argument: --to: ` + invalidName + `owner id "a/b" has byte '/' …`},
		{nil, []string{"relocations", "--object", "nope"}, `meshctl: invalid_argument: --object: ` + invalidName + `"nope" …`},
		{nil, []string{"objects", "--owner", ".."}, `meshctl: invalid_argument: --owner: ` + invalidName + `owner id ".."`},
		{nil, []string{"objects", "--kind", "thing"}, `meshctl: invalid_argument: --kind: "thing" (want actor or group)`},
		{nil, []string{"objects", "--contains", ""}, `meshctl: invalid_argument: --contains: "": 1 to 256 bytes`},
		{nil, []string{"objects", "--limit", "10001"}, `meshctl: invalid_argument: --limit: 10001 (want 1..10000, 0: all)`},
		{nil, []string{"objects", "--after", "actor/counter/c1"}, `meshctl: invalid_argument: --after: pages a listing: give --limit too`},
		{nil, []string{"drain", "../n1"}, `meshctl: invalid_argument: OWNER: ` + invalidName + `owner id "../n1" has byte '/' …`},
		{nil, []string{"group", "create", "actor/counter/c1"}, `meshctl: invalid_argument: GROUP: "actor/counter/c1" is not a group (want group/<id>)`},
		{nil, []string{"group", "create", "group/g1", "--on", "n 1"}, `meshctl: invalid_argument: --on: ` + invalidName + `owner id "n 1" …`},
		{nil, []string{"group", "join", "group/g1", "group/g2"}, `meshctl: invalid_argument: ACTOR: "group/g2" is not an actor (want actor/<type>/<id>)`},
		{nil, []string{"group", "join", "../g1", "actor/counter/c1"}, `meshctl: invalid_argument: GROUP: ` + invalidName + `"../g1" …`},
		{nil, []string{"group", "leave", "group/g1", "actor/counter"}, `meshctl: invalid_argument: ACTOR: ` + invalidName + `"actor/counter" …`},
		{nil, []string{"group", "members", "../owners"}, `meshctl: invalid_argument: GROUP: ` + invalidName + `"../owners" …`},
		// Addresses, whatever the command.
		{nil, []string{"--node", "bad addr", "call", "actor/counter/x", "get"}, `meshctl: invalid_argument: --node: "bad addr" is not host:port like 127.0.0.1:7100: missing port in address`},
		{nil, []string{"--node", "bad host:7100", "owners"}, `meshctl: invalid_argument: --node: "bad host:7100" is not host:port like 127.0.0.1:7100: host "bad host" has byte ' ' (want an IP address or a DNS name)`},
		{nil, []string{"--node", ":7100", "owners"}, `meshctl: invalid_argument: --node: ":7100" is not host:port like 127.0.0.1:7100: no host`},
		{nil, []string{"--node", "127.0.0.1:0", "owners"}, `meshctl: invalid_argument: --node: "127.0.0.1:0" is not host:port like 127.0.0.1:7100: port "0" is not a number 1..65535`},
		{nil, []string{"--node", "127.0.0.1:65536", "owners"}, `meshctl: invalid_argument: --node: "127.0.0.1:65536" … port "65536" is not a number 1..65535`},
		{nil, []string{"--node", "127.0.0.1:grpc", "owners"}, `meshctl: invalid_argument: --node: "127.0.0.1:grpc" … port "grpc" is not a number 1..65535`},
		{map[string]string{"MESHCTL_NODE": "127.0.0.1"}, []string{"owners"}, `meshctl: invalid_argument: --node: "127.0.0.1" is not host:port like 127.0.0.1:7100: missing port in address`},
		{nil, []string{"--locationd", "ftp://127.0.0.1:7070", "owners"}, `meshctl: invalid_argument: --locationd: "ftp://127.0.0.1:7070" is not a URL like http://127.0.0.1:7070: scheme "ftp" (want http or https)`},
		{nil, []string{"--locationd", "http://", "owners"}, `meshctl: invalid_argument: --locationd: "http://" is not a URL like http://127.0.0.1:7070: no host`},
		{nil, []string{"--locationd", "http://:7070", "owners"}, `meshctl: invalid_argument: --locationd: "http://:7070" … no host`},
		{nil, []string{"--locationd", "http://127.0.0.1:0", "owners"}, `meshctl: invalid_argument: --locationd: "http://127.0.0.1:0" … port "0" is not a number 1..65535`},
		{nil, []string{"--locationd", "http://127.0.0.1:7070?x=1", "owners"}, `meshctl: invalid_argument: --locationd: "http://127.0.0.1:7070?x=1" … a query or fragment`},
		{nil, []string{"--locationd", "http://bad host:7070", "owners"}, `meshctl: invalid_argument: --locationd: "http://bad host:7070" …`},
		{map[string]string{"MESHCTL_LOCATIOND": "127.0.0.1:7070"}, []string{"owners"}, `meshctl: invalid_argument: --locationd: "127.0.0.1:7070" is not a URL like http://127.0.0.1:7070: …`},
	} {
		args := tc.args
		if tc.env["MESHCTL_LOCATIOND"] == "" && !strings.HasPrefix(args[0], "--locationd") {
			args = append([]string{"--locationd", rec.URL}, args...)
		}
		start := time.Now()
		r := meshctl(tc.env, args...)
		line, rest, _ := strings.Cut(r.stderr, "\n")
		if r.code != exitUsage || rest != "" || r.stdout != "" || !matchLine(line, tc.stderr) {
			t.Errorf("meshctl %v: exit %d, stdout %q, stderr %q; want exit 2, stderr %q", tc.args, r.code, r.stdout, r.stderr, tc.stderr)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("meshctl %v: refused after %s, not at once", tc.args, d)
		}
	}
	if got := rec.requests(); len(got) != 0 {
		t.Errorf("refused command lines sent requests: %q", got)
	}
}

// matchLine reports whether line is pattern, where each "…" of pattern
// stands for any text.
func matchLine(line, pattern string) bool {
	parts := strings.Split(pattern, "…")
	if !strings.HasPrefix(line, parts[0]) {
		return false
	}
	line = line[len(parts[0]):]
	for i, p := range parts[1:] {
		if i == len(parts)-2 {
			return strings.HasSuffix(line, p)
		}
		j := strings.Index(line, p)
		if j < 0 {
			return false
		}
		line = line[j+len(p):]
	}
	return line == ""
}

// Names and addresses that parse are taken (the checks are no stricter than
// the API).
func TestValidArguments(t *testing.T) {
	for _, s := range []string{"127.0.0.1:7100", "localhost:7100", "[::1]:7100", "[fe80::1%eth0]:7100", "meshnode-1.svc_a.local:65535"} {
		if err := checkHostPort("--node", s); err != nil {
			t.Errorf("--node %q: %v", s, err)
		}
	}
	for _, s := range []string{"http://127.0.0.1:7070", "https://locationd.example", "http://[::1]:7070/", "http://proxy:8080/meshloc"} {
		if err := checkHTTPURL("--locationd", s); err != nil {
			t.Errorf("--locationd %q: %v", s, err)
		}
	}
	for _, s := range []string{"actor/counter/c1", "group/g1", "actor/dbank/a:b@c.d-e_f"} {
		if _, err := parseObject("OBJECT", s); err != nil {
			t.Errorf("object %q: %v", s, err)
		}
	}
}

// Every POST meshctl makes carries Content-Type application/json (locationd
// refuses another with 415).
func TestPostsAreJSON(t *testing.T) {
	rec := newRecorder(t)
	for _, args := range [][]string{
		{"relocate", "actor/counter/c1"},
		{"rebalance", "--budget", "3"},
		{"drain", "n1"},
		{"group", "create", "group/g1"},
		{"group", "join", "group/g1", "actor/counter/c1"},
		{"group", "leave", "group/g1", "actor/counter/c1"},
	} {
		r := meshctl(nil, append([]string{"--locationd", rec.URL}, args...)...)
		if r.code != exitError || !strings.HasPrefix(r.stderr, "meshctl: not_found: recorded") {
			t.Errorf("meshctl %v: %+v", args, r)
		}
	}
	want := []string{
		"POST /v1/relocations application/json",
		"POST /v1/rebalance application/json",
		"POST /v1/owners/n1/drain application/json",
		"POST /v1/groups application/json",
		"POST /v1/groups/join application/json",
		"POST /v1/groups/leave application/json",
	}
	if got := rec.requests(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
