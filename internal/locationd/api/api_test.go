package api

import (
	"errors"
	"fmt"
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
	for code, status := range map[string]int{CodeInvalidArgument: 400, CodeNotFound: 404, CodeMethodNotAllowed: 405, CodeConflict: 409, CodeUnavailable: 503, CodeInternal: 500} {
		if StatusOf(code) != status || codeOf(status) != code {
			t.Errorf("%s ↔ %d", code, status)
		}
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
