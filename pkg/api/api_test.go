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
