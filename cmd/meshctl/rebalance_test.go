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

// fakeRebalance answers /v1/rebalance*, /v1/controllers like locationd.
type fakeRebalance struct {
	*httptest.Server
	mu      sync.Mutex
	bodies  []string
	queries []string
}

var (
	planMoves = []api.RebalanceMove{
		{Object: "actor/counter/c1", From: "n1", To: "n2", Reason: "load", Units: 1},
		{Object: "actor/counter/c2", From: "n3", To: "n2", Reason: "drain", Units: 1},
	}
	planOwners = []api.RebalanceOwner{
		{ID: "n1", Weight: 1, State: "serving", Before: 3, After: 2, Fair: 2},
		{ID: "n2", Weight: 1, State: "serving", Before: 0, After: 2, Fair: 2},
		{ID: "n3", Weight: 1, State: "draining", Before: 2, After: 1},
	}
)

func newFakeRebalance(t *testing.T) *fakeRebalance {
	f := &fakeRebalance{}
	write := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	plan := func(budget int) api.RebalancePlan {
		return api.RebalancePlan{Revision: 42, Budget: budget, Tolerance: 0.1, DryRun: true, Moves: append([]api.RebalanceMove(nil), planMoves...),
			Owners: planOwners, Stuck: []api.RebalanceStuck{{Object: "actor/counter/p", Owner: "n3", Reason: "drain", Why: "pinned"}}}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/rebalance/plan", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.queries = append(f.queries, r.URL.RawQuery)
		f.mu.Unlock()
		write(w, 200, plan(32))
	})
	mux.HandleFunc("POST /v1/rebalance", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.bodies = append(f.bodies, string(b))
		f.mu.Unlock()
		var req api.RebalanceRequest
		_ = json.Unmarshal(b, &req)
		p := plan(req.Budget)
		p.DryRun = false
		p.Moves[0].Outcome, p.Moves[0].Code, p.Moves[0].InterruptionMicros = "completed", "ok", 1500
		p.Completed = 1
		if req.Budget == 7 {
			p.Moves[1].Outcome, p.Moves[1].Code, p.Moves[1].Message = "aborted", "deadline_exceeded", "no READY in time"
			p.Failed = 1
		} else {
			p.Moves[1].Outcome, p.Moves[1].Code = "completed", "ok"
			p.Completed = 2
		}
		write(w, 200, p)
	})
	mux.HandleFunc("GET /v1/controllers", func(w http.ResponseWriter, r *http.Request) {
		write(w, 200, api.ControllersResponse{Controllers: []api.Controller{{Name: "recovery",
			Leader: &api.ControllerLeader{ID: "h/11", HTTP: "127.0.0.1:7071", Since: "2026-03-01T12:00:00.000Z", Orphans: 3, Asleep: 40, RecoverOrphans: true, Recovered: 5},
			Self:   api.ControllerSelf{ID: "h/12", HTTP: "127.0.0.1:7072"}}}})
	})
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

func (f *fakeRebalance) run(args ...string) result {
	return meshctl(nil, append([]string{"--locationd", f.URL}, args...)...)
}

func TestRebalanceCommand(t *testing.T) {
	f := newFakeRebalance(t)

	r := f.run("rebalance", "--dry-run", "--budget", "5")
	for _, want := range []string{
		"actor/counter/c1  n1    ->  n2  load",
		"actor/counter/c2  n3    ->  n2  drain",
		"n3     draining  1       2       1      0.0",
		"stuck: actor/counter/p stays on n3 (drain): pinned\n",
		"plan: 2 moves (budget 32, revision 42)\n",
	} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("rebalance --dry-run: exit %d, stdout lacks %q:\n%s\nstderr %s", r.code, want, r.stdout, r.stderr)
		}
	}
	if strings.Contains(r.stdout, "OUTCOME") || len(f.bodies) != 0 || f.queries[0] != "budget=5" {
		t.Fatalf("a dry run posted %v (queries %v):\n%s", f.bodies, f.queries, r.stdout)
	}

	r = f.run("rebalance")
	if r.code != 0 || !strings.Contains(r.stdout, "completed  1.5ms") || !strings.Contains(r.stdout, "rebalance: 2 moves: 2 completed, 0 skipped, 0 failed\n") {
		t.Fatalf("rebalance: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if f.bodies[0] != `{}` {
		t.Fatalf("body %s", f.bodies[0])
	}

	r = f.run("rebalance", "--budget", "7")
	if r.code != 1 || !strings.Contains(r.stdout, "aborted    -             no READY in time") ||
		r.stderr != "meshctl: failed: rebalance: 1 of 2 moves did not complete\n" || f.bodies[1] != `{"budget":7}` {
		t.Fatalf("a failed move: exit %d\n%s\nstderr %q, body %s", r.code, r.stdout, r.stderr, f.bodies[1])
	}

	for _, args := range [][]string{{"rebalance", "--budget", "-1"}, {"rebalance", "--budget", "10001"}, {"rebalance", "x"}, {"rebalance", "--wait", "0s"}} {
		if r := f.run(args...); r.code != 2 || !strings.HasPrefix(r.stderr, "meshctl: usage: ") {
			t.Errorf("meshctl %v: exit %d %q", args, r.code, r.stderr)
		}
	}
}

func TestControllersCommand(t *testing.T) {
	f := newFakeRebalance(t)
	r := f.run("controllers")
	want := "CONTROLLER  LEADER  HTTP            SINCE                     ORPHANS  ASLEEP  RECOVER  RECOVERED  FAILED  THIS\n" +
		"recovery    h/11    127.0.0.1:7071  2026-03-01T12:00:00.000Z  3        40      yes      5          0       follower h/12\n"
	if r.code != 0 || r.stdout != want {
		t.Fatalf("controllers: exit %d\n%s\nwant\n%s\nstderr %s", r.code, r.stdout, want, r.stderr)
	}
	if r := f.run("-o", "json", "controllers"); r.code != 0 || !strings.Contains(r.stdout, `"orphans": 3`) {
		t.Fatalf("controllers -o json: %d %s", r.code, r.stdout)
	}
}
