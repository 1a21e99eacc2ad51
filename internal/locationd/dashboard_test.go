package locationd

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/meshloc/meshloc/pkg/api"
)

// TestDashboardRoutes: the page and its two files, with the CSP; other
// paths under /ui/ are typed 404s.
func TestDashboardRoutes(t *testing.T) {
	r := start(t, nil)
	for _, tc := range []struct{ path, ctype, has string }{
		{"/", "text/html; charset=utf-8", `<script src="/ui/app.js"`},
		{"/ui/app.js", "text/javascript; charset=utf-8", "new EventSource('/v1/events"},
		{"/ui/app.css", "text/css; charset=utf-8", "--accent"},
	} {
		resp, err := http.Get(r.base + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != tc.ctype || !strings.Contains(b.String(), tc.has) ||
			resp.Header.Get("Content-Security-Policy") != dashboardCSP || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: %d %q %v", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header)
		}
	}
	if status, _, _ := rawGet(t, "HEAD", r.base+"/"); status != 200 {
		t.Errorf("HEAD /: %d", status)
	}
}

// TestCrossOriginRefused: a change sent from a page of another origin is a
// typed 403 before anything is read or done; the same origin, and clients
// that are not browsers, go on to the route (here: its typed 400 for a
// bad body).
func TestCrossOriginRefused(t *testing.T) {
	r := start(t, nil)
	host := strings.TrimPrefix(r.base, "http://")
	for _, tc := range []struct {
		path, origin, site string
		status             int
		code               string
	}{
		{"/v1/owners/n1/drain", "http://evil.example", "cross-site", 403, api.CodePermissionDenied},
		{"/v1/owners/n1/drain", "http://evil.example", "", 403, api.CodePermissionDenied},
		{"/v1/owners/n1/drain", "", "cross-site", 403, api.CodePermissionDenied},
		{"/v1/owners/n1/drain", "", "same-site", 403, api.CodePermissionDenied},
		{"/v1/owners/n1/drain", "null", "", 403, api.CodePermissionDenied},
		{"/v1/relocations", "http://" + host + ".evil.example", "", 403, api.CodePermissionDenied},
		{"/v1/relocations", "http://" + host, "same-origin", 400, api.CodeInvalidArgument},
		{"/v1/relocations", "", "", 400, api.CodeInvalidArgument},
		{"/v1/owners/n1/drain", "http://" + host, "same-origin", 400, api.CodeInvalidArgument},
	} {
		req, _ := http.NewRequest("POST", r.base+tc.path, strings.NewReader(`{"object":"../x"}`))
		req.Header.Set("Content-Type", "application/json")
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		if tc.site != "" {
			req.Header.Set("Sec-Fetch-Site", tc.site)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(b.String(), `"code":"`+tc.code+`"`) {
			t.Errorf("POST %s Origin %q Sec-Fetch-Site %q: %d %s, want %d %s", tc.path, tc.origin, tc.site, resp.StatusCode, b.String(), tc.status, tc.code)
		}
	}
}
