package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/api"
)

// fakeRelocations answers /v1/relocations like locationd, from canned values,
// and records the bodies and queries it got.
type fakeRelocations struct {
	*httptest.Server
	mu      sync.Mutex
	bodies  []string
	queries []string
}

var (
	t0        = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	completed = api.Relocation{
		RelocationID: "01958a3c-1f00-7abc-8def-0123456789ab", Object: "actor/counter/c1", Source: "n1@7", Target: "n2@11",
		Role: "source", Node: "n1", Phase: "done", Outcome: "completed", Code: "ok",
		Started: "2026-03-01T11:59:58.000Z", StartedUnixMs: t0.Add(-2 * time.Second).UnixMilli(),
		Ended: "2026-03-01T11:59:58.120Z", EndedUnixMs: t0.Add(-1880 * time.Millisecond).UnixMilli(),
		InterruptionMicros: 2345, PayloadBytes: 120,
	}
	aborted = api.Relocation{
		RelocationID: "01958a3c-2f00-7abc-8def-00000000beef", Object: "actor/list/l1", Source: "n2@11", Target: "n3@15",
		Role: "source", Node: "n2", Phase: "settling", Outcome: "aborted", Code: "deadline_exceeded",
		Message: "the target did not answer READY before the deadline",
		Started: "2026-03-01T11:50:00.000Z", StartedUnixMs: t0.Add(-10 * time.Minute).UnixMilli(),
		Ended: "2026-03-01T11:50:10.000Z", EndedUnixMs: t0.Add(-10*time.Minute + 10*time.Second).UnixMilli(),
	}
	inflight = api.Relocation{
		RelocationID: "01958a3c-3f00-7abc-8def-0000000cafe0", Object: "actor/bank/b1", Source: "n3@15", Target: "n1@7",
		Role: "target", Node: "n1", Phase: "streaming", StartedUnixMs: t0.Add(-1 * time.Second).UnixMilli(),
	}
)

func newFakeRelocations(t *testing.T) *fakeRelocations {
	f := &fakeRelocations{}
	write := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/relocations", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.bodies = append(f.bodies, string(b))
		f.mu.Unlock()
		var req api.RelocateRequest
		_ = json.Unmarshal(b, &req)
		if req.Wait != nil && !*req.Wait && req.Object == "actor/counter/c1" {
			started := completed
			started.Phase, started.Outcome, started.Code, started.Ended, started.EndedUnixMs = "intent", "", "", "", 0
			write(w, 202, started)
			return
		}
		switch req.Object {
		case "actor/counter/c1":
			write(w, 200, completed)
		case "actor/list/l1":
			write(w, 200, aborted)
		case "actor/counter/busy":
			write(w, 409, api.ErrorBody{Error: &api.Error{Code: api.CodeConflict, Message: "locationd: conflict: node n1@7 (127.0.0.1:7100): node: object already relocating: actor/counter/busy"}})
		case "actor/counter/gone":
			write(w, 503, api.ErrorBody{Error: &api.Error{Code: api.CodeUnavailable, Message: "locationd: owner not alive: n4@3 of actor/counter/gone has no live key of that generation"}})
		default:
			write(w, 404, api.ErrorBody{Error: &api.Error{Code: api.CodeNotFound, Message: "authority: object not found: " + req.Object}})
		}
	})
	mux.HandleFunc("GET /v1/relocations", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.queries = append(f.queries, r.URL.RawQuery)
		f.mu.Unlock()
		target := completed
		target.Role, target.Node, target.InterruptionMicros = "target", "n2", 0
		write(w, 200, api.RelocationsResponse{
			Relocations: []api.Relocation{inflight, completed, target, aborted},
			Unreachable: []api.UnreachableNode{{ID: "n4", Address: "127.0.0.1:7130", Error: "Unavailable: connection refused"}},
		})
	})
	// The event stream of --watch: a stale report of a relocation the
	// list shows ended, a new relocation's start and end, a node's stream
	// lost and back (the list is read again); then nothing.
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.queries = append(f.queries, "events "+r.URL.RawQuery)
		f.mu.Unlock()
		stale := completed
		stale.Phase, stale.Outcome, stale.Code, stale.Ended, stale.EndedUnixMs = "intent", "", "", "", 0
		started := api.Relocation{RelocationID: "01958a3c-4f00-7abc-8def-0000000000c2", Object: "actor/counter/c2", Source: "n1@7", Target: "n2@11",
			Role: "source", Node: "n1", Phase: "intent"}
		done := started
		done.Phase, done.Outcome, done.Code, done.InterruptionMicros = "done", "completed", "ok", 850
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "retry: 10\nevent: hello\ndata: {\"resumed\":false}\n\n")
		for i, ev := range []struct {
			typ string
			v   any
		}{{"relocation", stale}, {"relocation", started}, {"relocation", done},
			{"watch", api.NodeWatch{Node: "n5", Address: "127.0.0.1:7140", Error: "EOF"}},
			{"watch", api.NodeWatch{Node: "n5", Address: "127.0.0.1:7140", Connected: true}}} {
			b, _ := json.Marshal(ev.v)
			fmt.Fprintf(w, "id: e-%d\nevent: %s\ndata: %s\n\n", i+1, ev.typ, b)
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

func (f *fakeRelocations) run(args ...string) result {
	return meshctl(nil, append([]string{"--locationd", f.URL}, args...)...)
}

func TestRelocate(t *testing.T) {
	f := newFakeRelocations(t)
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
		body           string
	}{
		{[]string{"relocate", "actor/counter/c1", "--to", "n2", "--timeout", "5s"}, 0,
			"relocation 01958a3c-1f00-7abc-8def-0123456789ab actor/counter/c1 n1@7 -> n2@11: completed in 2.35ms\n", "",
			`{"object":"actor/counter/c1","target":"n2","timeoutMs":5000}`},
		{[]string{"relocate", "actor/counter/c1"}, 0,
			"relocation 01958a3c-1f00-7abc-8def-0123456789ab actor/counter/c1 n1@7 -> n2@11: completed in 2.35ms\n", "",
			`{"object":"actor/counter/c1"}`},
		{[]string{"relocate", "actor/list/l1"}, 1,
			"relocation 01958a3c-2f00-7abc-8def-00000000beef actor/list/l1 n2@11 -> n3@15: aborted in 0s: deadline_exceeded: the target did not answer READY before the deadline\n",
			"meshctl: aborted: relocation 01958a3c-2f00-7abc-8def-00000000beef of actor/list/l1 did not complete: deadline_exceeded: the target did not answer READY before the deadline\n",
			`{"object":"actor/list/l1"}`},
		{[]string{"relocate", "actor/counter/busy", "--to", "n2"}, 1, "",
			"meshctl: conflict: node n1@7 (127.0.0.1:7100): node: object already relocating: actor/counter/busy\n",
			`{"object":"actor/counter/busy","target":"n2"}`},
		{[]string{"relocate", "actor/counter/gone"}, 1, "",
			"meshctl: unavailable: locationd: owner not alive: n4@3 of actor/counter/gone has no live key of that generation\n",
			`{"object":"actor/counter/gone"}`},
		{[]string{"relocate", "actor/counter/x"}, 1, "", "meshctl: not_found: authority: object not found: actor/counter/x\n",
			`{"object":"actor/counter/x"}`},
		{[]string{"relocate", "actor/counter/c1", "--no-wait"}, 0,
			"relocation 01958a3c-1f00-7abc-8def-0123456789ab actor/counter/c1 n1@7 -> n2@11: started\n", "",
			`{"object":"actor/counter/c1","wait":false}`},
		{[]string{"relocate", "actor/counter/c1", "--foreground"}, 0,
			"relocation 01958a3c-1f00-7abc-8def-0123456789ab actor/counter/c1 n1@7 -> n2@11: completed in 2.35ms\n", "",
			`{"object":"actor/counter/c1","foreground":true}`},
		{[]string{"relocate"}, 2, "", "meshctl: usage: meshctl relocate: accepts 1 arg(s), received 0 (see meshctl --help)\n", ""},
		{[]string{"relocate", "actor/counter/c1", "--timeout", "-1s"}, 2, "",
			"meshctl: usage: --timeout -1s must be between 0 (locationd's default) and 10m0s (see meshctl --help)\n", ""},
		{[]string{"relocate", "actor/counter/c1", "--timeout", "1h"}, 2, "",
			"meshctl: usage: --timeout 1h0m0s must be between 0 (locationd's default) and 10m0s (see meshctl --help)\n", ""},
	} {
		f.mu.Lock()
		f.bodies = nil
		f.mu.Unlock()
		r := f.run(tc.args...)
		if r.code != tc.code || r.stdout != tc.stdout || r.stderr != tc.stderr {
			t.Errorf("meshctl %v: exit %d\nstdout %q\nstderr %q\nwant exit %d\nstdout %q\nstderr %q", tc.args, r.code, r.stdout, r.stderr, tc.code, tc.stdout, tc.stderr)
		}
		f.mu.Lock()
		got := strings.Join(f.bodies, "|")
		f.mu.Unlock()
		if got != tc.body {
			t.Errorf("meshctl %v sent %s, want %s", tc.args, got, tc.body)
		}
	}
}

func TestRelocateJSON(t *testing.T) {
	f := newFakeRelocations(t)
	for _, tc := range []struct {
		args []string
		code int
		want any
	}{
		{[]string{"-o", "json", "relocate", "actor/counter/c1"}, 0, completed},
		{[]string{"-o", "json", "relocate", "actor/list/l1"}, 1, aborted},
	} {
		r := f.run(tc.args...)
		raw, _ := json.Marshal(tc.want)
		var want bytes.Buffer
		_ = json.Indent(&want, raw, "", "  ")
		if r.code != tc.code || r.stdout != want.String()+"\n" {
			t.Errorf("meshctl %v: exit %d stderr %q\n%s\nwant\n%s", tc.args, r.code, r.stderr, r.stdout, want.String())
		}
	}
	r := f.run("relocations", "-o", "json")
	var got api.RelocationsResponse
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != 0 || err != nil || len(got.Relocations) != 4 || len(got.Unreachable) != 1 {
		t.Errorf("relocations -o json: exit %d %v\n%s", r.code, err, r.stdout)
	}
}

func TestRelocations(t *testing.T) {
	f := newFakeRelocations(t)
	defer func(old func() time.Time) { now = old }(now)
	now = func() time.Time { return t0 }
	r := f.run("relocations")
	want := `
ID        OBJECT            SOURCE  TARGET  ROLE    PHASE      OUTCOME    INTERRUPTION  AGE
000cafe0  actor/bank/b1     n3@15   n1@7    target  streaming  in-flight  -             1s
456789ab  actor/counter/c1  n1@7    n2@11   source  done       completed  2.35ms        1s
456789ab  actor/counter/c1  n1@7    n2@11   target  done       completed  -             1s
0000beef  actor/list/l1     n2@11   n3@15   source  settling   aborted    -             9m
warning: node n4 (127.0.0.1:7130) did not answer, its relocations are not listed: Unavailable: connection refused
`
	if r.code != 0 || r.stderr != "" || r.stdout != strings.TrimPrefix(want, "\n") {
		t.Errorf("relocations: exit %d, stderr %q, stdout:\n%s\nwant:\n%s", r.code, r.stderr, r.stdout, want)
	}
	for _, args := range [][]string{
		{"relocations", "--object", "actor/counter/c1"},
		{"relocations", "--inflight"},
		{"relocations", "--inflight=false", "--object", "actor/list/l1"},
	} {
		if r := f.run(args...); r.code != 0 {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	want2 := []string{"", "object=actor%2Fcounter%2Fc1", "inflight=true", "inflight=false&object=actor%2Flist%2Fl1"}
	if strings.Join(f.queries, " ") != strings.Join(want2, " ") {
		t.Errorf("queries = %q, want %q", f.queries, want2)
	}
	if r := f.run("relocations", "extra"); r.code != 2 {
		t.Errorf("relocations extra: %+v", r)
	}
}

func TestAgeAndInterruption(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {-time.Second, "0s"}, {119 * time.Second, "119s"}, {2 * time.Minute, "2m"},
		{119 * time.Minute, "119m"}, {2 * time.Hour, "2h"}, {47 * time.Hour, "47h"}, {72 * time.Hour, "3d"},
	} {
		if got := age(t0, t0.Add(-tc.d).UnixMilli()); got != tc.want {
			t.Errorf("age(%s) = %s, want %s", tc.d, got, tc.want)
		}
	}
	if age(t0, 0) != "-" {
		t.Error("age of an unknown time")
	}
	for us, want := range map[int64]string{0: "-", 850: "850µs", 2345: "2.35ms", 1_234_567: "1.235s"} {
		if got := interruption(us, "-"); got != want {
			t.Errorf("interruption(%d) = %s, want %s", us, got, want)
		}
	}
}

// --watch prints the list, then each relocation side's start and end from
// the event stream, once per state (never an in-flight report after its
// end), and the warning for a node once; the list is read again when a
// node's stream comes back.
func TestRelocationsWatch(t *testing.T) {
	f := newFakeRelocations(t)
	defer func(old func() time.Time) { now = old }(now)
	now = func() time.Time { return t0 }
	r := f.run("relocations", "--watch", "--for", "300ms")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	for _, want := range []string{
		"12:00:00.000 456789ab actor/counter/c1 source n1@7 -> n2@11 completed in 2.35ms\n",
		"12:00:00.000 0000beef actor/list/l1 source n2@11 -> n3@15 aborted deadline_exceeded",
		"12:00:00.000 000000c2 actor/counter/c2 source n1@7 -> n2@11 intent\n",
		"12:00:00.000 000000c2 actor/counter/c2 source n1@7 -> n2@11 completed in 850µs\n",
		"warning: node n4 (127.0.0.1:7130) did not answer",
		"warning: locationd lost its stream from node n5 (127.0.0.1:7140), its relocations may be missed: EOF\n",
	} {
		if strings.Count(r.stdout, want) != 1 {
			t.Errorf("watch printed %q %d times:\n%s", want, strings.Count(r.stdout, want), r.stdout)
		}
	}
	if strings.Count(r.stdout, "actor/counter/c1 source") != 1 {
		t.Errorf("the stale report of c1 was printed:\n%s", r.stdout)
	}
	f.mu.Lock()
	q := fmt.Sprint(f.queries)
	f.mu.Unlock()
	if q != "[events types=relocation%2Cwatch  ]" {
		t.Errorf("requests %q: want the stream, the list, and the list again", q)
	}
	if r := f.run("relocations", "--watch", "--for", "-1s"); r.code != 2 {
		t.Errorf("--for -1s: exit %d, want 2", r.code)
	}
	if r := f.run("relocations", "--watch", "--every", "1s", "--for", "50ms"); r.code != 0 { // deprecated, ignored
		t.Errorf("--every: exit %d, stderr %q", r.code, r.stderr)
	}
}
