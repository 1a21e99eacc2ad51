package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

func TestDecodeError(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		code   string
		msg    string
	}{
		{404, `{"error":{"code":"not_found","message":"authority: object not found: actor/a/b"}}`, CodeNotFound, "authority: object not found: actor/a/b"},
		{503, "no upstream", CodeUnavailable, "Service Unavailable: no upstream"},
		{400, "", CodeInvalidArgument, "Bad Request"},
		{502, `{"unrelated":1}`, CodeUnavailable, `Bad Gateway: {"unrelated":1}`},
		{418, "", CodeInternal, "I'm a teapot"},
	} {
		e := DecodeError(tc.status, []byte(tc.body))
		if e.Code != tc.code || e.Message != tc.msg || e.Status != tc.status {
			t.Errorf("DecodeError(%d, %q) = %+v", tc.status, tc.body, e)
		}
	}
}

func TestErrorIs(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", &Error{Code: CodeNotFound, Message: "x"})
	if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnavailable) {
		t.Fatal("Is by code")
	}
	if e, ok := AsError(err); !ok || e.Error() != "not_found: x" {
		t.Fatal(e)
	}
	for code, status := range map[string]int{CodeInvalidArgument: 400, CodeNotFound: 404, CodeMethodNotAllowed: 405, CodeConflict: 409,
		CodeUnsupportedMediaType: 415, CodeUnavailable: 503, CodeInternal: 500} {
		if StatusOf(code) != status || CodeOfStatus(status) != code {
			t.Errorf("%s ↔ %d", code, status)
		}
	}
}

func TestStatusOfUnknownCode(t *testing.T) {
	if StatusOf("drain_incomplete") != 500 || CodeOfStatus(504) != CodeUnavailable || CodeOfStatus(502) != CodeUnavailable || CodeOfStatus(418) != CodeInternal {
		t.Fatal("codes outside the table")
	}
	e := DecodeError(415, []byte(`{"error":{"code":"unsupported_media_type","message":"m"}}`))
	if !errors.Is(e, ErrUnsupportedMediaType) || e.Status != 415 {
		t.Fatal(e)
	}
}

// Every POST of the Client is application/json; names that do not parse
// are refused before anything is sent.
func TestClientRequests(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
		mu.Unlock()
		w.WriteHeader(http.StatusNotFound)
	}))
	defer srv.Close()
	c, err := NewClient(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	calls := []func() error{
		func() error { _, _, err := c.Relocate(ctx, RelocateRequest{Object: "actor/counter/c1"}); return err },
		func() error { _, _, err := c.CreateGroup(ctx, GroupRequest{Group: "group/g1"}); return err },
		func() error {
			_, _, err := c.JoinGroup(ctx, GroupRequest{Group: "group/g1", Actor: "actor/counter/c1"})
			return err
		},
		func() error {
			_, _, err := c.LeaveGroup(ctx, GroupRequest{Group: "group/g1", Actor: "actor/counter/c1"})
			return err
		},
		func() error { _, _, err := c.Rebalance(ctx, RebalanceRequest{}); return err },
		func() error { _, err := c.Drain(ctx, "n1", DrainRequest{}, nil); return err },
	}
	for i, call := range calls {
		if err := call(); !errors.Is(err, ErrNotFound) {
			t.Errorf("call %d: %v", i, err)
		}
	}
	want := []string{
		"POST /v1/relocations application/json", "POST /v1/groups application/json", "POST /v1/groups/join application/json",
		"POST /v1/groups/leave application/json", "POST /v1/rebalance application/json", "POST /v1/owners/n1/drain application/json",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requests %q, want %q", got, want)
	}
	got = nil
	for _, call := range []func() error{
		func() error { _, _, err := c.Object(ctx, "../owners"); return err },
		func() error { _, _, err := c.Object(ctx, "actor/counter/../c1"); return err },
		func() error { _, _, err := c.Group(ctx, "group/.."); return err },
		func() error { _, err := c.Drain(ctx, "../n1", DrainRequest{}, nil); return err },
	} {
		if err := call(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("bad name: %v", err)
		}
	}
	if len(got) != 0 {
		t.Errorf("bad names were sent: %q", got)
	}
}

func TestNewClient(t *testing.T) {
	for _, bad := range []string{"", "localhost:7070", "ftp://x", "http://"} {
		if _, err := NewClient(bad, nil); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("NewClient(%q) = %v", bad, err)
		}
	}
	c, err := NewClient("http://127.0.0.1:7070/", nil)
	if err != nil || c.Base() != "http://127.0.0.1:7070" {
		t.Fatal(c, err)
	}
}

func TestObjectsQueryValues(t *testing.T) {
	if got := (ObjectsQuery{Kind: "actor", Owner: "n1", Orphaned: new(false)}).Values().Encode(); got != "kind=actor&orphaned=false&owner=n1" {
		t.Fatal(got)
	}
	if got := (ObjectsQuery{}).Values().Encode(); got != "" {
		t.Fatal(got)
	}
}

func TestRelocationsQueryValues(t *testing.T) {
	if got := (RelocationsQuery{Object: "actor/counter/c1", InFlight: new(true)}).Values().Encode(); got != "inflight=true&object=actor%2Fcounter%2Fc1" {
		t.Fatal(got)
	}
	if got := (RelocationsQuery{}).Values().Encode(); got != "" {
		t.Fatal(got)
	}
	if !(Relocation{}).InFlight() || (Relocation{Outcome: OutcomeAborted}).InFlight() {
		t.Fatal("InFlight")
	}
}
