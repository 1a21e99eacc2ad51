package locationd

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/meshloc/meshloc/internal/locationd/api"
)

// A POST body that is not JSON is refused with 415, before anything is read
// from etcd or asked of a node; an empty body needs no Content-Type.
func TestUnsupportedMediaType(t *testing.T) {
	r := start(t, nil)
	c := r.etcd(t)
	before := storeState(t, c)
	const obj = `{"object":"actor/counter/c1"}`
	for _, tc := range []struct {
		path, ctype, body string
		chunked           bool
		status            int
		code              string
	}{
		{"/v1/relocations", "text/plain", obj, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/relocations", "", obj, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/relocations", "", obj, true, 415, api.CodeUnsupportedMediaType},
		{"/v1/relocations", "application/json; charset=latin1", obj, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/relocations", "application/json; foo=bar", obj, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/relocations", "application/json; =", obj, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/relocations", "application/json-seq", obj, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/relocations", "application/x-www-form-urlencoded", "object=actor/counter/c1", false, 415, api.CodeUnsupportedMediaType},
		// JSON, parameters allowed: the request goes on (no such object).
		{"/v1/relocations", "application/json", obj, false, 404, api.CodeNotFound},
		{"/v1/relocations", "application/json;charset=UTF-8", obj, true, 404, api.CodeNotFound},
		{"/v1/relocations", "Application/JSON", obj, false, 404, api.CodeNotFound},
		// An empty body: the media type is not judged.
		{"/v1/relocations", "", "", false, 400, api.CodeInvalidArgument},
		{"/v1/owners/n9/drain", "", "", false, 404, api.CodeNotFound},
		{"/v1/owners/n9/drain", "", "", true, 404, api.CodeNotFound},
		{"/v1/owners/n9/drain", "application/x-www-form-urlencoded", "", false, 404, api.CodeNotFound},
		{"/v1/owners/n9/drain", "", "{}", false, 415, api.CodeUnsupportedMediaType},
		{"/v1/owners/n9/drain", "text/plain", "{}", true, 415, api.CodeUnsupportedMediaType},
		{"/v1/owners/n9/drain", "application/json", "{}", false, 404, api.CodeNotFound},
		{"/v1/groups", "text/plain", `{"group":"group/g1"}`, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/groups/join", "", `{"group":"group/g1","actor":"actor/counter/c1"}`, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/groups/leave", "text/json", `{"group":"group/g1","actor":"actor/counter/c1"}`, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/rebalance", "text/plain", `{"budget":1}`, false, 415, api.CodeUnsupportedMediaType},
		{"/v1/rebalance", "application/json", `{"budget":-1}`, false, 400, api.CodeInvalidArgument},
	} {
		var body io.Reader = strings.NewReader(tc.body)
		if tc.chunked {
			body = io.MultiReader(body) // no known length: sent chunked
		}
		req, err := http.NewRequest(http.MethodPost, r.base+tc.path, body)
		if err != nil {
			t.Fatal(err)
		}
		if tc.ctype != "" {
			req.Header.Set("Content-Type", tc.ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var eb api.ErrorBody
		if err := json.Unmarshal(b, &eb); err != nil || eb.Error == nil {
			t.Errorf("POST %s %q %q: body %q is not an error body", tc.path, tc.ctype, tc.body, b)
			continue
		}
		if resp.StatusCode != tc.status || eb.Error.Code != tc.code || eb.Error.Message == "" {
			t.Errorf("POST %s %q %q (chunked %v): %d %s, want %d %s", tc.path, tc.ctype, tc.body, tc.chunked, resp.StatusCode, b, tc.status, tc.code)
		}
	}
	if after := storeState(t, c); after != before {
		t.Errorf("refused requests changed the store: %s → %s", before, after)
	}
}
