package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/meshloc/meshloc/pkg/api"
)

// Every POST of the Admin is application/json; names that do not parse
// are refused before anything is sent.
func TestAdminRequests(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
		mu.Unlock()
		w.WriteHeader(http.StatusNotFound)
	}))
	defer srv.Close()
	c, err := NewAdmin(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	calls := []func() error{
		func() error {
			_, _, err := c.Relocate(ctx, api.RelocateRequest{Object: "actor/counter/c1"})
			return err
		},
		func() error { _, _, err := c.CreateGroup(ctx, api.GroupRequest{Group: "group/g1"}); return err },
		func() error {
			_, _, err := c.JoinGroup(ctx, api.GroupRequest{Group: "group/g1", Actor: "actor/counter/c1"})
			return err
		},
		func() error {
			_, _, err := c.LeaveGroup(ctx, api.GroupRequest{Group: "group/g1", Actor: "actor/counter/c1"})
			return err
		},
		func() error { _, _, err := c.Rebalance(ctx, api.RebalanceRequest{}); return err },
		func() error { _, err := c.Drain(ctx, "n1", api.DrainRequest{}, nil); return err },
	}
	for i, call := range calls {
		if err := call(); !errors.Is(err, api.ErrNotFound) {
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
		func() error { _, err := c.Drain(ctx, "../n1", api.DrainRequest{}, nil); return err },
	} {
		if err := call(); !errors.Is(err, api.ErrInvalidArgument) {
			t.Errorf("bad name: %v", err)
		}
	}
	if len(got) != 0 {
		t.Errorf("bad names were sent: %q", got)
	}
}

func TestNewAdmin(t *testing.T) {
	for _, bad := range []string{"", "localhost:7070", "ftp://x", "http://"} {
		if _, err := NewAdmin(bad, nil); !errors.Is(err, api.ErrInvalidArgument) {
			t.Errorf("NewAdmin(%q) = %v", bad, err)
		}
	}
	c, err := NewAdmin("http://127.0.0.1:7070/", nil)
	if err != nil || c.Base() != "http://127.0.0.1:7070" {
		t.Fatal(c, err)
	}
}
