package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
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
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, &Error{Code: CodeInvalidArgument, Message: err.Error()}
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("locationd %s: %v", c.base, err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	if err != nil {
		return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("locationd %s: reading answer: %v", c.base, err)}
	}
	if resp.StatusCode/100 != 2 {
		return nil, DecodeError(resp.StatusCode, body)
	}
	return body, nil
}

func (c *Client) get(ctx context.Context, path string, q url.Values, out any) ([]byte, error) {
	body, err := c.Raw(ctx, path, q)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(body, out); err != nil {
		return nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("locationd %s%s: undecodable answer: %v", c.base, path, err)}
	}
	return body, nil
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

// Object reads one object, e.g. "actor/counter/c1". The name is sent as it
// is (escaped by net/url where needed); the server validates it.
func (c *Client) Object(ctx context.Context, name string) (ObjectResponse, []byte, error) {
	var r ObjectResponse
	raw, err := c.get(ctx, "/v1/objects/"+name, nil, &r)
	return r, raw, err
}

// Ready asks /readyz: nil when locationd reaches its etcd.
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.Raw(ctx, "/readyz", nil)
	return err
}
