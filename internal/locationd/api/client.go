package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/meshloc/meshloc/pkg/keyspace"
)

// MaxBody bounds how much of an answer the Client reads (bytes).
const MaxBody = 64 << 20

// Client calls one locationd over HTTP. The zero value is not usable: use
// NewClient. It is safe for concurrent use.
type Client struct {
	base *url.URL
	hc   *http.Client
}

// NewClient returns a client for base (e.g. http://127.0.0.1:7070). hc nil
// means http.DefaultClient; bound each call with its ctx.
func NewClient(base string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("locationd address %q is not a URL like http://127.0.0.1:7070", base)}
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: u, hc: hc}, nil
}

// Base is the locationd URL.
func (c *Client) Base() string { return c.base.String() }

// Raw GETs path (e.g. "/v1/owners") with query q and returns the body of a
// 2xx answer as it came. Any other answer is an *Error; a transport failure is
// an *Error with CodeUnavailable.
func (c *Client) Raw(ctx context.Context, path string, q url.Values) ([]byte, error) {
	return c.do(ctx, http.MethodGet, path, q, nil)
}

// JSONContentType is the media type of every request body locationd takes:
// a POST with a non-empty body of another type is refused with
// CodeUnsupportedMediaType (415). The Client sends it with every POST.
const JSONContentType = "application/json"

// do sends one request (body nil: none; else JSON) and returns the body of a
// 2xx answer; see Raw.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body []byte) ([]byte, error) {
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, &Error{Code: CodeInvalidArgument, Message: err.Error()}
	}
	req.Header.Set("Accept", "application/json")
	if body != nil || method == http.MethodPost {
		req.Header.Set("Content-Type", JSONContentType)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("locationd %s: %v", c.base, err)}
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	if err != nil {
		return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("locationd %s: reading answer: %v", c.base, err)}
	}
	if resp.StatusCode/100 != 2 {
		return nil, DecodeError(resp.StatusCode, answer)
	}
	return answer, nil
}

func (c *Client) get(ctx context.Context, path string, q url.Values, out any) ([]byte, error) {
	return c.decode(path, out)(c.Raw(ctx, path, q))
}

// decode returns a function that unmarshals a successful answer of path into out.
func (c *Client) decode(path string, out any) func([]byte, error) ([]byte, error) {
	return func(body []byte, err error) ([]byte, error) {
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(body, out); err != nil {
			return nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("locationd %s%s: undecodable answer: %v", c.base, path, err)}
		}
		return body, nil
	}
}

// Owners lists the live owners. The raw JSON body is returned too, for
// callers that print the API's JSON as it is.
func (c *Client) Owners(ctx context.Context) (OwnersResponse, []byte, error) {
	var r OwnersResponse
	raw, err := c.get(ctx, "/v1/owners", nil, &r)
	return r, raw, err
}

// ObjectsQuery filters Objects. Zero fields do not filter.
type ObjectsQuery struct {
	Kind  string // "actor" or "group"
	Owner string // an owner id
	// Orphaned nil: all; true: only objects whose owner is gone; false: only
	// objects whose owner is alive.
	Orphaned *bool
}

// Values is the query string of q.
func (q ObjectsQuery) Values() url.Values {
	v := url.Values{}
	if q.Kind != "" {
		v.Set("kind", q.Kind)
	}
	if q.Owner != "" {
		v.Set("owner", q.Owner)
	}
	if q.Orphaned != nil {
		v.Set("orphaned", fmt.Sprint(*q.Orphaned))
	}
	return v
}

// Objects lists authority records.
func (c *Client) Objects(ctx context.Context, q ObjectsQuery) (ObjectsResponse, []byte, error) {
	var r ObjectsResponse
	raw, err := c.get(ctx, "/v1/objects", q.Values(), &r)
	return r, raw, err
}

// Object reads one object, e.g. "actor/counter/c1". A name that does not
// parse (keyspace.ParseObject) is an *Error with CodeInvalidArgument, and
// nothing is sent: a name like "../owners" would name another route.
func (c *Client) Object(ctx context.Context, name string) (ObjectResponse, []byte, error) {
	var r ObjectResponse
	obj, err := parseName(name)
	if err != nil {
		return r, nil, err
	}
	raw, err := c.get(ctx, "/v1/objects/"+obj.String(), nil, &r)
	return r, raw, err
}

// parseName parses an object name for a path, as an *Error.
func parseName(name string) (keyspace.Object, error) {
	obj, err := keyspace.ParseObject(name)
	if err != nil {
		return obj, &Error{Code: CodeInvalidArgument, Message: err.Error()}
	}
	return obj, nil
}

// Ready asks /readyz: nil when locationd reaches its etcd.
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.Raw(ctx, "/readyz", nil)
	return err
}

// Relocate asks locationd to move one object (POST /v1/relocations) and
// returns when the relocation ended: a Relocation whose Outcome says how (an
// outcome other than completed is not an error here: the relocation ran).
// Bound ctx above the relocation's timeout (req.TimeoutMs, or locationd's
// default of 10 s) plus a few seconds: a ctx that ends first only stops the
// wait, not the relocation, which GET /v1/relocations still lists.
func (c *Client) Relocate(ctx context.Context, req RelocateRequest) (Relocation, []byte, error) {
	var r Relocation
	body, err := json.Marshal(req)
	if err != nil {
		return r, nil, &Error{Code: CodeInvalidArgument, Message: err.Error()}
	}
	raw, err := c.decode("/v1/relocations", &r)(c.do(ctx, http.MethodPost, "/v1/relocations", nil, body))
	return r, raw, err
}

// RelocationsQuery filters Relocations. Zero fields do not filter.
type RelocationsQuery struct {
	// Object keeps the relocations of this object.
	Object string
	// InFlight nil: all; true: only relocations in flight; false: only ended ones.
	InFlight *bool
}

// Values is the query string of q.
func (q RelocationsQuery) Values() url.Values {
	v := url.Values{}
	if q.Object != "" {
		v.Set("object", q.Object)
	}
	if q.InFlight != nil {
		v.Set("inflight", fmt.Sprint(*q.InFlight))
	}
	return v
}

// Relocations lists the in-flight and recent relocations of every live node
// (GET /v1/relocations). Nodes that did not answer are listed in Unreachable.
func (c *Client) Relocations(ctx context.Context, q RelocationsQuery) (RelocationsResponse, []byte, error) {
	var r RelocationsResponse
	raw, err := c.get(ctx, "/v1/relocations", q.Values(), &r)
	return r, raw, err
}
