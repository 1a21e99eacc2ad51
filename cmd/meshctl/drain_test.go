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

// fakeDrain answers POST /v1/owners/{id}/drain like locationd, streaming
// canned events, and records the bodies it got.
type fakeDrain struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []string
}

var (
	drainOK = []api.DrainEvent{
		{Kind: "started", Remaining: 2},
		{Kind: "progress", Moved: 1, Remaining: 1},
		{Kind: "progress", Moved: 2},
		{Kind: "report", Moved: 2, Report: &api.DrainReport{Owner: "n1@4", MovedCount: 2, Failed: []api.DrainFailure{},
			DurationMicros: 1_234_567, Bulks: 2, Relocations: 3, Stopping: true}},
		{Kind: "page", Page: &api.DrainPage{Moved: []api.DrainedObject{
			{Object: "actor/counter/c1", Target: "n2@7", Attempts: 1, InterruptionMicros: 1210}, {Object: "actor/list/l3", Target: "n2@7", Attempts: 2, InterruptionMicros: 2345}},
			Last: true}},
	}
	drainPartial = []api.DrainEvent{
		{Kind: "started", Remaining: 1},
		{Kind: "failed", Object: "actor/blob/b1", Attempt: 3, Code: "unavailable", Message: "node: no relocation target for actor/blob/b1", Failed: 1, Remaining: 1},
		{Kind: "report", Failed: 1, Report: &api.DrainReport{Owner: "n5@2", FailedCount: 1,
			Failed:         []api.DrainFailure{{Object: "actor/blob/b1", Code: "unavailable", Reason: "node: no relocation target for actor/blob/b1", Attempts: 3}},
			DurationMicros: 3_100_000, Relocations: 0, Stopping: false}},
	}
	drainBroken = []api.DrainEvent{
		{Kind: "started", Remaining: 1},
		{Kind: "error", Error: &api.Error{Code: "unavailable", Message: "locationd: node unavailable: node n6@3 (127.0.0.1:7150): connection reset"}},
	}
)

func newFakeDrain(t *testing.T) *fakeDrain {
	f := &fakeDrain{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/owners/{id}/drain", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.bodies = append(f.bodies, string(b))
		f.mu.Unlock()
		var evs []api.DrainEvent
		switch r.PathValue("id") {
		case "n1":
			evs = drainOK
		case "n5":
			evs = drainPartial
		case "n6":
			evs = drainBroken
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(404)
			_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: &api.Error{Code: api.CodeNotFound, Message: "locationd: owner not found: " + r.PathValue("id") + " has no live owner key (see GET /v1/owners)"}})
			return
		}
		w.Header().Set("Content-Type", api.DrainContentType)
		for _, ev := range evs {
			_ = json.NewEncoder(w).Encode(ev)
			w.(http.Flusher).Flush()
		}
	})
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

func TestDrain(t *testing.T) {
	f := newFakeDrain(t)
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
		body           string
	}{
		{[]string{"drain", "n1", "--list"}, 0, `draining n1: 2 objects
moved 1, failed 0, left 1
moved 2, failed 0, left 0
drained n1@4 in 1.235s: moved 2, failed 0 (2 bulk moves, 3 relocations); stopping
  moved: actor/counter/c1 -> n2@7 in 1.21ms
  moved: actor/list/l3 -> n2@7 in 2.35ms
`, "", `{"list":true}`},
		{[]string{"drain", "n5", "--keep-running", "--concurrency", "2", "--timeout", "30s"}, 1, `draining n5: 1 objects
failed actor/blob/b1 (attempts 3): unavailable: node: no relocation target for actor/blob/b1
drained n5@2 in 3.1s: moved 0, failed 1 (0 bulk moves, 0 relocations); still running (draining)
  not moved: actor/blob/b1: unavailable: node: no relocation target for actor/blob/b1
`, "meshctl: drain_incomplete: drain of n5@2: 1 of 1 objects not moved (actor/blob/b1: node: no relocation target for actor/blob/b1)\n",
			`{"concurrency":2,"timeoutMs":30000,"stopAfter":false}`},
		{[]string{"drain", "n6"}, 1, "draining n6: 1 objects\n",
			"meshctl: unavailable: locationd: node unavailable: node n6@3 (127.0.0.1:7150): connection reset\n", `{}`},
		{[]string{"drain", "n9"}, 1, "", "meshctl: not_found: locationd: owner not found: n9 has no live owner key (see GET /v1/owners)\n", `{}`},
		{[]string{"drain"}, 2, "", "meshctl: usage: meshctl drain: accepts 1 arg(s), received 0 (see meshctl --help)\n", ""},
		{[]string{"drain", "n1", "--timeout", "-1s"}, 2, "",
			"meshctl: usage: --timeout -1s must be between 0 (the node's --drain-timeout) and 1h0m0s (see meshctl --help)\n", ""},
		{[]string{"drain", "n1", "--concurrency", "-3"}, 2, "",
			"meshctl: usage: --concurrency -3 must be between 0 (the node's --drain-concurrency) and 4096 (see meshctl --help)\n", ""},
	} {
		f.mu.Lock()
		f.bodies = nil
		f.mu.Unlock()
		r := meshctl(nil, append([]string{"--locationd", f.URL}, tc.args...)...)
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

func TestDrainJSON(t *testing.T) {
	f := newFakeDrain(t)
	r := meshctl(nil, "--locationd", f.URL, "-o", "json", "drain", "n1", "--list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != len(drainOK) {
		t.Fatalf("exit %d, %d lines:\n%s\n%s", r.code, len(lines), r.stdout, r.stderr)
	}
	var report, page api.DrainEvent
	if err := json.Unmarshal([]byte(lines[len(lines)-2]), &report); err != nil || report.Report == nil || report.Report.Owner != "n1@4" {
		t.Fatalf("report line %s: %v", lines[len(lines)-2], err)
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &page); err != nil || page.Page == nil || len(page.Page.Moved) != 2 {
		t.Fatalf("page line %s: %v", lines[len(lines)-1], err)
	}
}
