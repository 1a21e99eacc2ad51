package locationd

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// body is b as a route sees it: bounded by http.MaxBytesReader.
func body(b []byte) io.Reader {
	return http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(bytes.NewReader(b)), maxRequestBody)
}

// wantInvalid fails unless err is what errorTable answers with a 400
// invalid_argument.
func wantInvalid(t *testing.T, route string, b []byte, err error) {
	t.Helper()
	if e := toAPIError(err); e.Code != api.CodeInvalidArgument || e.Status != http.StatusBadRequest {
		t.Fatalf("%s %q: refused with %s (%d): %v", route, b, e.Code, e.Status, err)
	}
}

// isObject reports whether b is one JSON object and white space around it.
func isObject(b []byte) bool {
	t := bytes.TrimLeft(b, " \t\r\n")
	return len(t) > 0 && t[0] == '{' && json.Valid(b)
}

// again encodes v and decodes it with decode: the same request must come
// out.
func again[T any](t *testing.T, route string, v T, decode func(io.Reader) (T, error)) {
	t.Helper()
	enc, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decode(bytes.NewReader(enc))
	if err != nil || !reflect.DeepEqual(back, v) {
		t.Fatalf("%s: %+v → %s → %+v %v", route, v, enc, back, err)
	}
}

// FuzzRequestBodies feeds the same bytes, as a request body, to the
// decoder of every POST route (relocations, groups create/join/leave,
// drain, rebalance): no panic; a refusal is a 400 invalid_argument; an
// accepted body is one JSON object (for drain: or no body at all) whose
// request satisfies the route's checks, and that request, encoded again,
// decodes to itself.
//
//	go test -run '^$' -fuzz '^FuzzRequestBodies$' -fuzztime 1m ./internal/locationd/
func FuzzRequestBodies(f *testing.F) {
	for _, s := range []string{
		`{"object":"actor/counter/c1","target":"n2","timeoutMs":10000}`, `{"object":"group/g1"}`, `{"object":"actor/counter/c1","timeoutMs":600001}`,
		`{"group":"group/g1","actor":"actor/counter/c1","timeoutMs":10000}`, `{"group":"group/g1","on":"n1"}`, `{"group":"actor/counter/c1"}`,
		`{"concurrency":4,"timeoutMs":60000,"stopAfter":true}`, `{"stopAfter":false}`, `{"concurrency":257}`,
		`{"budget":32,"dryRun":true}`, `{"budget":-1}`, `{}`, ``, ` `, `null`, `[]`, `"x"`, `1`, `{"object":"a"} {}`,
		`{"object":"actor/counter/c1","extra":1}`, `{"OBJECT":"actor/counter/c1"}`, `{"object":"actor/counter/c1","object":"x"}`,
		`{"timeoutMs":1e3}`, `{"budget":9223372036854775808}`, "{\"object\":\"actor/counter/\xff\"}", `{"object":"actor/counter/c1"`,
		`{"object":"` + strings.Repeat("x", maxRequestBody) + `"}`,
	} {
		f.Add([]byte(s))
	}
	const defaultTimeout = 10 * time.Second
	f.Fuzz(func(t *testing.T, b []byte) {
		if req, obj, err := decodeRelocateBody(body(b), defaultTimeout); err != nil {
			wantInvalid(t, "relocations", b, err)
		} else {
			if !isObject(b) || obj.String() != req.Object || obj.Validate() != nil ||
				req.Target != "" && keyspace.ValidateOwnerID(req.Target) != nil || req.TimeoutMs < 0 || req.TimeoutMs > api.MaxRelocationTimeoutMs {
				t.Fatalf("relocations accepted %q as %+v, %+v", b, req, obj)
			}
			again(t, "relocations", req, func(r io.Reader) (api.RelocateRequest, error) {
				v, _, err := decodeRelocateBody(r, defaultTimeout)
				return v, err
			})
		}
		for _, op := range []string{groupCreate, groupJoin, groupLeave} {
			needActor := op != groupCreate
			route := "groups/" + op
			req, g, a, err := decodeGroupBody(body(b), op)
			if err != nil {
				wantInvalid(t, route, b, err)
				continue
			}
			if !isObject(b) || g.Kind != keyspace.KindGroup || g.String() != req.Group || req.TimeoutMs < 0 || req.TimeoutMs > api.MaxRelocationTimeoutMs ||
				needActor && (a.Kind != keyspace.KindActor || a.String() != req.Actor || req.On != "") ||
				!needActor && (req.Actor != "" || !a.IsZero() || req.On != "" && keyspace.ValidateOwnerID(req.On) != nil) ||
				op != groupJoin && req.TimeoutMs != 0 {
				t.Fatalf("%s accepted %q as %+v, %+v, %+v", route, b, req, g, a)
			}
			again(t, route, req, func(r io.Reader) (api.GroupRequest, error) {
				v, _, _, err := decodeGroupBody(r, op)
				return v, err
			})
		}
		if req, err := decodeDrainBody(body(b)); err != nil {
			wantInvalid(t, "drain", b, err)
		} else {
			if !isObject(b) && len(bytes.TrimLeft(b, " \t\r\n")) != 0 || req.Concurrency < 0 || req.Concurrency > api.MaxDrainConcurrency ||
				req.TimeoutMs < 0 || req.TimeoutMs > api.MaxDrainTimeoutMs {
				t.Fatalf("drain accepted %q as %+v", b, req)
			}
			again(t, "drain", req, decodeDrainBody)
		}
		if req, budget, err := decodeRebalanceBody(body(b)); err != nil {
			wantInvalid(t, "rebalance", b, err)
		} else {
			if !isObject(b) || budget < 1 || budget > api.MaxRebalanceBudget || req.Budget != 0 && req.Budget != budget {
				t.Fatalf("rebalance accepted %q as %+v, budget %d", b, req, budget)
			}
			again(t, "rebalance", req, func(r io.Reader) (api.RebalanceRequest, error) {
				v, _, err := decodeRebalanceBody(r)
				return v, err
			})
		}
	})
}

// A body that is JSON but not an object (null, an array, a scalar) is
// refused by every route; before, null decoded as {} (FuzzRequestBodies'
// first find: a POST /v1/rebalance with the body null ran a rebalance with
// the default budget, and a drain took every default).
func TestBodyMustBeAnObject(t *testing.T) {
	for _, s := range []string{"null", " null ", "[]", `"x"`, "1", "true"} {
		b := []byte(s)
		_, _, err := decodeRelocateBody(body(b), time.Second)
		wantInvalid(t, "relocations", b, err)
		_, _, _, err = decodeGroupBody(body(b), groupCreate)
		wantInvalid(t, "groups", b, err)
		_, err = decodeDrainBody(body(b))
		wantInvalid(t, "drain", b, err)
		_, _, err = decodeRebalanceBody(body(b))
		wantInvalid(t, "rebalance", b, err)
	}
	if req, err := decodeDrainBody(body([]byte(" \n"))); err != nil || !reflect.DeepEqual(req, api.DrainRequest{}) {
		t.Fatalf("drain without a body: %+v %v", req, err)
	}
	if _, _, err := decodeRebalanceBody(body([]byte("{}"))); err != nil {
		t.Fatalf("rebalance {}: %v", err)
	}
	if err := decodeBody(body(nil), new(api.RebalanceRequest)); !errors.Is(err, errEmptyBody) {
		t.Fatalf("no body: %v", err)
	}
}
