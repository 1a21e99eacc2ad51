package locationd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/client"
)

// POST /v1/owners/{id}/drain streams the node's progress and ends with the
// report; the node is then asked to stop.
func TestDrainRoute(t *testing.T) {
	m := startMesh(t, 1)
	n1 := m.nodes[0]
	c, err := client.New(context.Background(), client.Config{Etcd: m.etcd})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var names []string
	for i := range 6 {
		name := fmt.Sprintf("actor/counter/dr%d", i)
		if _, err := c.Call(context.Background(), name, "add", "3"); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	m.nodes = append(m.nodes, startNode(t, m.ep, "n2"))
	var lines []string
	var kinds []string
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := m.ld.api.Drain(ctx, "n1", api.DrainRequest{Concurrency: 2, TimeoutMs: 30000, List: true}, func(ev api.DrainEvent, raw []byte) {
		kinds = append(kinds, ev.Kind)
		lines = append(lines, string(raw))
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Owner != n1.Self().String() || rep.MovedCount != len(names) || len(rep.Moved) != len(names) || rep.FailedCount != 0 ||
		len(rep.Failed) != 0 || !rep.Stopping || rep.Started == "" || rep.Bulks == 0 {
		t.Fatalf("report %+v", rep)
	}
	if kinds[0] != api.DrainKindStarted || kinds[len(kinds)-2] != api.DrainKindReport || kinds[len(kinds)-1] != api.DrainKindPage {
		t.Fatalf("event kinds %v", kinds)
	}
	for _, mv := range rep.Moved {
		if !strings.HasPrefix(mv.Target, "n2@") || mv.RelocationID == "" || m.owner(t, mv.Object).ID != "n2" {
			t.Errorf("moved %+v (owner %s)", mv, m.owner(t, mv.Object))
		}
	}
	select {
	case <-n1.StopRequested():
	case <-time.After(10 * time.Second):
		t.Fatal("n1 was not asked to stop")
	}
	for _, name := range names {
		r, err := c.Call(context.Background(), name, "get")
		if err != nil || !strings.Contains(string(r.Payload), `3`) {
			t.Fatalf("%s after the drain: %v %s", name, err, r.Payload)
		}
	}
	t.Logf("%d lines, e.g.\n%s\n%s", len(lines), lines[0], lines[len(lines)-1])
}

// Bad input is refused with a typed error before the node is asked: nothing
// drains.
func TestDrainRouteBadInput(t *testing.T) {
	m := startMesh(t, 1)
	n1 := m.nodes[0]
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{http.MethodPost, "/v1/owners/n9/drain", "", 404, api.CodeNotFound},
		{http.MethodPost, "/v1/owners/a%20b/drain", "", 400, api.CodeInvalidArgument},
		{http.MethodPost, "/v1/owners/n1/drain", `{"concurrency":-1}`, 400, api.CodeInvalidArgument},
		{http.MethodPost, "/v1/owners/n1/drain", `{"concurrency":5000}`, 400, api.CodeInvalidArgument},
		{http.MethodPost, "/v1/owners/n1/drain", `{"timeoutMs":-1}`, 400, api.CodeInvalidArgument},
		{http.MethodPost, "/v1/owners/n1/drain", `{"timeoutMs":99999999999}`, 400, api.CodeInvalidArgument},
		{http.MethodPost, "/v1/owners/n1/drain", `{"concurency":2}`, 400, api.CodeInvalidArgument},
		{http.MethodPost, "/v1/owners/n1/drain", `{} {}`, 400, api.CodeInvalidArgument},
		{http.MethodPost, "/v1/owners/n1/drain?x=1", ``, 400, api.CodeInvalidArgument},
		{http.MethodGet, "/v1/owners/n1/drain", "", 405, api.CodeMethodNotAllowed},
	} {
		req, err := http.NewRequest(tc.method, m.ld.base+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		e := api.DecodeError(resp.StatusCode, body)
		if resp.StatusCode != tc.status || e.Code != tc.code {
			t.Errorf("%s %s %s: %d %s, want %d %s", tc.method, tc.path, tc.body, resp.StatusCode, body, tc.status, tc.code)
		}
	}
	if n1.Draining() {
		t.Fatal("bad input left n1 draining")
	}
	_, err := m.ld.api.Drain(context.Background(), "n9", api.DrainRequest{}, nil)
	if !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("client Drain of an unknown owner: %v", err)
	}
}
