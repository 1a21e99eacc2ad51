package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestProbe(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	mux.HandleFunc("/empty", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("/fenced", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "lease expired\nsecond line", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/healthz", http.StatusFound) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()

	for _, tc := range []struct {
		args         []string
		code         int
		stdout       string
		stderrPrefix string
	}{
		{[]string{"probe", srv.URL + "/healthz"}, 0, "200 ok\n", ""},
		{[]string{"probe", srv.URL + "/readyz"}, 0, "200 {\"status\":\"ok\"}\n", ""},
		{[]string{"probe", srv.URL + "/empty"}, 0, "204 No Content\n", ""},
		{[]string{"probe", srv.URL + "/fenced"}, 1, "", "meshctl: unavailable: GET " + srv.URL + "/fenced: 503 Service Unavailable: lease expired\n"},
		{[]string{"probe", srv.URL + "/nothing"}, 1, "", "meshctl: unavailable: GET " + srv.URL + "/nothing: 404 Not Found: 404 page not found\n"},
		{[]string{"probe", srv.URL + "/moved"}, 1, "", "meshctl: unavailable: GET " + srv.URL + "/moved: 302 Found"},
		{[]string{"--timeout", "200ms", "probe", srv.URL + "/slow"}, 1, "", "meshctl: unavailable: GET " + srv.URL + "/slow: "},
		{[]string{"probe", closedURL + "/healthz"}, 1, "", "meshctl: unavailable: GET " + closedURL + "/healthz: "},
		{[]string{"probe", "127.0.0.1:7101/healthz"}, 2, "", "meshctl: usage: probe: "},
		{[]string{"probe"}, 2, "", "meshctl: usage: "},
		{[]string{"probe", "http://a/", "http://b/"}, 2, "", "meshctl: usage: "},
	} {
		r := meshctl(nil, tc.args...)
		if r.code != tc.code || r.stdout != tc.stdout || !strings.HasPrefix(r.stderr, tc.stderrPrefix) || (tc.code == 0) != (r.stderr == "") {
			t.Errorf("meshctl %v: exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr starting %q",
				tc.args, r.code, r.stdout, r.stderr, tc.code, tc.stdout, tc.stderrPrefix)
		}
		if strings.Count(r.stderr, "\n") > 1 {
			t.Errorf("meshctl %v: more than one error line: %q", tc.args, r.stderr)
		}
	}
}
