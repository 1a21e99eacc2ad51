package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/tracing"
	"github.com/meshloc/meshloc/pkg/wire"
)

// Client calls one locationd over HTTP. The zero value is not usable: use
// NewAdmin. It is safe for concurrent use.
type Admin struct {
	base *url.URL
	hc   *http.Client
}

// NewAdmin returns a client for base (e.g. http://127.0.0.1:7070). hc nil
// means http.DefaultClient; bound each call with its ctx.
func NewAdmin(base string, hc *http.Client) (*Admin, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &api.Error{Code: api.CodeInvalidArgument, Message: fmt.Sprintf("locationd address %q is not a URL like http://127.0.0.1:7070", base)}
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Admin{base: u, hc: hc}, nil
}

// Base is the locationd URL.
func (c *Admin) Base() string { return c.base.String() }

// Raw GETs path (e.g. "/v1/owners") with query q and returns the body of a
// 2xx answer as it came. Any other answer is an *api.Error; a transport failure is
// an *api.Error with api.CodeUnavailable.
func (c *Admin) Raw(ctx context.Context, path string, q url.Values) ([]byte, error) {
	return c.do(ctx, http.MethodGet, path, q, nil)
}

// do sends one request (body nil: none; else JSON) and returns the body of a
// 2xx answer; see Raw.
func (c *Admin) do(ctx context.Context, method, path string, q url.Values, body []byte) ([]byte, error) {
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, &api.Error{Code: api.CodeInvalidArgument, Message: err.Error()}
	}
	req.Header.Set("Accept", "application/json")
	tracing.InjectHTTP(ctx, req.Header)
	if body != nil || method == http.MethodPost {
		req.Header.Set("Content-Type", api.JSONContentType)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf("locationd %s: %v", c.base, err)}
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, api.MaxBody))
	if err != nil {
		return nil, &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf("locationd %s: reading answer: %v", c.base, err)}
	}
	if resp.StatusCode/100 != 2 {
		return nil, api.DecodeError(resp.StatusCode, answer)
	}
	return answer, nil
}

func (c *Admin) get(ctx context.Context, path string, q url.Values, out any) ([]byte, error) {
	return c.decode(path, out)(c.Raw(ctx, path, q))
}

// decode returns a function that unmarshals a successful answer of path into out.
func (c *Admin) decode(path string, out any) func([]byte, error) ([]byte, error) {
	return func(body []byte, err error) ([]byte, error) {
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(body, out); err != nil {
			return nil, &api.Error{Code: api.CodeInternal, Message: fmt.Sprintf("locationd %s%s: undecodable answer: %v", c.base, path, err)}
		}
		return body, nil
	}
}

// Owners lists the live owners. The raw JSON body is returned too, for
// callers that print the API's JSON as it is.
func (c *Admin) Owners(ctx context.Context) (api.OwnersResponse, []byte, error) {
	var r api.OwnersResponse
	raw, err := c.get(ctx, "/v1/owners", nil, &r)
	return r, raw, err
}

// Objects lists authority records: all of them in one answer, or with
// q.Limit one page (api.ObjectsQuery; EachObject reads every page).
func (c *Admin) Objects(ctx context.Context, q api.ObjectsQuery) (api.ObjectsResponse, []byte, error) {
	var r api.ObjectsResponse
	raw, err := c.get(ctx, "/v1/objects", q.Values(), &r)
	return r, raw, err
}

// EachObject hands f every object q selects, in name order, reading pages
// of q.Limit (0: 1,000) at the revision of the first, so the listing is of
// one revision however large; it returns that revision. f's error stops it
// and is returned as it is; so is the first page's that failed (a conflict
// when etcd compacted the revision meanwhile: list again).
func (c *Admin) EachObject(ctx context.Context, q api.ObjectsQuery, f func(api.Object) error) (int64, error) {
	if q.Limit == 0 {
		q.Limit = 1000
	}
	for {
		page, _, err := c.Objects(ctx, q)
		if err != nil {
			return q.Revision, err
		}
		for _, o := range page.Objects {
			if err := f(o); err != nil {
				return page.Revision, err
			}
		}
		if page.Next == "" {
			return page.Revision, nil
		}
		q.After, q.Revision = page.Next, page.Revision
	}
}

// Object reads one object, e.g. "actor/counter/c1". A name that does not
// parse (keyspace.ParseObject) is an *api.Error with api.CodeInvalidArgument, and
// nothing is sent: a name like "../owners" would name another route.
func (c *Admin) Object(ctx context.Context, name string) (api.ObjectResponse, []byte, error) {
	var r api.ObjectResponse
	obj, err := parseName(name)
	if err != nil {
		return r, nil, err
	}
	raw, err := c.get(ctx, "/v1/objects/"+obj.String(), nil, &r)
	return r, raw, err
}

// Delete deletes one object (DELETE /v1/objects/{object}; the operate
// role): its record, persisted state and replies go in one etcd
// transaction, and its owner drops the instance. A caller that knew the
// object is answered CODE_DELETED; the next call creates a new object of a
// larger generation. A group, a member of one and a relocating object are
// refused (api.CodeConflict), an unknown one is api.CodeNotFound.
func (c *Admin) Delete(ctx context.Context, name string) (api.Deleted, []byte, error) {
	var r api.Deleted
	obj, err := parseName(name)
	if err != nil {
		return r, nil, err
	}
	path := "/v1/objects/" + obj.String()
	raw, err := c.decode(path, &r)(c.do(ctx, http.MethodDelete, path, nil, nil))
	return r, raw, err
}

// parseName parses an object name for a path, as an *api.Error.
func parseName(name string) (keyspace.Object, error) {
	obj, err := keyspace.ParseObject(name)
	if err != nil {
		return obj, &api.Error{Code: api.CodeInvalidArgument, Message: err.Error()}
	}
	return obj, nil
}

// Ready asks /readyz: nil when locationd reaches its etcd.
func (c *Admin) Ready(ctx context.Context) error {
	_, err := c.Raw(ctx, "/readyz", nil)
	return err
}

// Relocate asks locationd to move one object (POST /v1/relocations) and
// returns when the relocation ended: a api.Relocation whose Outcome says how (an
// outcome other than completed is not an error here: the relocation ran).
// Bound ctx above the relocation's timeout (req.TimeoutMs, or locationd's
// default of 10 s) plus a few seconds: a ctx that ends first only stops the
// wait, not the relocation, which GET /v1/relocations still lists.
func (c *Admin) Relocate(ctx context.Context, req api.RelocateRequest) (api.Relocation, []byte, error) {
	var r api.Relocation
	body, err := json.Marshal(req)
	if err != nil {
		return r, nil, &api.Error{Code: api.CodeInvalidArgument, Message: err.Error()}
	}
	raw, err := c.decode("/v1/relocations", &r)(c.do(ctx, http.MethodPost, "/v1/relocations", nil, body))
	return r, raw, err
}

// Relocations lists the in-flight and recent relocations of every live node
// (GET /v1/relocations). Nodes that did not answer are listed in Unreachable.
func (c *Admin) Relocations(ctx context.Context, q api.RelocationsQuery) (api.RelocationsResponse, []byte, error) {
	var r api.RelocationsResponse
	raw, err := c.get(ctx, "/v1/relocations", q.Values(), &r)
	return r, raw, err
}

// Relocation reads one relocation by id (GET /v1/relocations/{id}), in
// flight or ended. An id that does not parse is an *api.Error with
// api.CodeInvalidArgument, and nothing is sent.
func (c *Admin) Relocation(ctx context.Context, id string) (api.Relocation, []byte, error) {
	var r api.Relocation
	rid, err := wire.ParseRelocationID(id)
	if err != nil {
		return r, nil, &api.Error{Code: api.CodeInvalidArgument, Message: err.Error()}
	}
	raw, err := c.get(ctx, "/v1/relocations/"+rid.String(), nil, &r)
	return r, raw, err
}

// Controllers asks GET /v1/controllers.
func (c *Admin) Controllers(ctx context.Context) (api.ControllersResponse, []byte, error) {
	var r api.ControllersResponse
	raw, err := c.get(ctx, "/v1/controllers", nil, &r)
	return r, raw, err
}

// Etcd asks GET /v1/etcd: the etcd locationd uses, its sizes, alarms and
// compaction.
func (c *Admin) Etcd(ctx context.Context) (api.EtcdStatus, []byte, error) {
	var r api.EtcdStatus
	raw, err := c.get(ctx, "/v1/etcd", nil, &r)
	return r, raw, err
}

// Drain asks locationd to drain the owner (POST /v1/owners/{id}/drain) and
// reads the answer as it comes: progress, if set, gets each event with its
// raw line; the report is returned. With req.List the report's Moved and
// Failed hold every object, from the pages that follow it (in memory: a
// node of 100,000 objects makes a list of about 10 MB); without, Failed
// holds the first 100 and the counts say how many. A drain ends by itself
// (when it stops moving objects, at most an hour); bound ctx above it: a ctx
// that ends first only stops the wait, not the drain. A drain that ran is
// not an error even when objects could not be moved: see FailedCount. An owner id that is not valid
// (keyspace.ValidateOwnerID) is an *api.Error with api.CodeInvalidArgument, and
// nothing is sent.
func (c *Admin) Drain(ctx context.Context, owner string, req api.DrainRequest, progress func(ev api.DrainEvent, raw []byte)) (api.DrainReport, error) {
	if err := keyspace.ValidateOwnerID(owner); err != nil {
		return api.DrainReport{}, &api.Error{Code: api.CodeInvalidArgument, Message: err.Error()}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return api.DrainReport{}, &api.Error{Code: api.CodeInvalidArgument, Message: err.Error()}
	}
	u := *c.base
	u.Path += "/v1/owners/" + url.PathEscape(owner) + "/drain"
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return api.DrainReport{}, &api.Error{Code: api.CodeInvalidArgument, Message: err.Error()}
	}
	hr.Header.Set("Accept", api.DrainContentType+", application/json")
	tracing.InjectHTTP(ctx, hr.Header)
	hr.Header.Set("Content-Type", api.JSONContentType)
	resp, err := c.hc.Do(hr)
	if err != nil {
		return api.DrainReport{}, &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf("locationd %s: %v", c.base, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		answer, _ := io.ReadAll(io.LimitReader(resp.Body, api.MaxBody))
		return api.DrainReport{}, api.DecodeError(resp.StatusCode, answer)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), api.MaxBody)
	var report *api.DrainReport
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var ev api.DrainEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return api.DrainReport{}, &api.Error{Code: api.CodeInternal, Message: fmt.Sprintf("locationd %s: undecodable drain event %q: %v", c.base, line, err)}
		}
		if progress != nil {
			progress(ev, line)
		}
		switch ev.Kind {
		case api.DrainKindReport:
			if ev.Report == nil {
				return api.DrainReport{}, &api.Error{Code: api.CodeInternal, Message: "locationd: a report line without a report"}
			}
			if !req.List {
				return *ev.Report, nil
			}
			report = ev.Report
			report.Moved, report.Failed = nil, nil // the pages list them all
		case api.DrainKindPage:
			if report == nil || ev.Page == nil {
				return api.DrainReport{}, &api.Error{Code: api.CodeInternal, Message: "locationd: a page line before the report, or without a page"}
			}
			report.Moved = append(report.Moved, ev.Page.Moved...)
			report.Failed = append(report.Failed, ev.Page.Failed...)
			if ev.Page.Last {
				return *report, nil
			}
		case api.DrainKindError:
			if ev.Error == nil {
				ev.Error = &api.Error{Code: api.CodeInternal, Message: "locationd: an error line without an error"}
			}
			return api.DrainReport{}, ev.Error
		}
	}
	msg := "the answer ended before the report"
	if err := sc.Err(); err != nil {
		msg = err.Error()
	}
	return api.DrainReport{}, &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf("locationd %s: drain of %s: %s; the drain may still run (see meshctl owners)", c.base, owner, msg)}
}

func (c *Admin) postGroup(ctx context.Context, path string, req api.GroupRequest) (api.Group, []byte, error) {
	var g api.Group
	body, err := json.Marshal(req)
	if err != nil {
		return g, nil, &api.Error{Code: api.CodeInvalidArgument, Message: err.Error()}
	}
	raw, err := c.decode(path, &g)(c.do(ctx, http.MethodPost, path, nil, body))
	return g, raw, err
}

// CreateGroup creates req.Group on req.On (or a node locationd chooses).
func (c *Admin) CreateGroup(ctx context.Context, req api.GroupRequest) (api.Group, []byte, error) {
	return c.postGroup(ctx, "/v1/groups", req)
}

// JoinGroup makes req.Actor a member of req.Group. An actor living on
// another node than the group is relocated there (Actor Join): the answer
// comes at READY, with that relocation.
func (c *Admin) JoinGroup(ctx context.Context, req api.GroupRequest) (api.Group, []byte, error) {
	return c.postGroup(ctx, "/v1/groups/join", req)
}

// LeaveGroup removes req.Actor from req.Group.
func (c *Admin) LeaveGroup(ctx context.Context, req api.GroupRequest) (api.Group, []byte, error) {
	return c.postGroup(ctx, "/v1/groups/leave", req)
}

// Group reads a group, e.g. "group/g1". A name that does not parse is an
// *api.Error with api.CodeInvalidArgument, and nothing is sent (see api.Object).
func (c *Admin) Group(ctx context.Context, name string) (api.Group, []byte, error) {
	var g api.Group
	obj, err := parseName(name)
	if err != nil {
		return g, nil, err
	}
	raw, err := c.get(ctx, "/v1/groups/"+obj.String(), nil, &g)
	return g, raw, err
}

// RebalancePlanOf asks GET /v1/rebalance/plan?budget=N (budget 0: the
// default).
func (c *Admin) RebalancePlanOf(ctx context.Context, budget int) (api.RebalancePlan, []byte, error) {
	var r api.RebalancePlan
	q := url.Values{}
	if budget != 0 {
		q.Set("budget", strconv.Itoa(budget))
	}
	raw, err := c.get(ctx, "/v1/rebalance/plan", q, &r)
	return r, raw, err
}

// RebalancePlanColocate asks GET /v1/rebalance/plan?budget=N&colocate=true:
// the plan with the co-location step (budget 0: the default).
func (c *Admin) RebalancePlanColocate(ctx context.Context, budget int) (api.RebalancePlan, []byte, error) {
	var r api.RebalancePlan
	q := url.Values{"colocate": {"true"}}
	if budget != 0 {
		q.Set("budget", strconv.Itoa(budget))
	}
	raw, err := c.get(ctx, "/v1/rebalance/plan", q, &r)
	return r, raw, err
}

// Rebalance asks POST /v1/rebalance and returns when every move ended.
// Bound ctx generously: moves run a few at a time, each up to locationd's
// relocation timeout.
func (c *Admin) Rebalance(ctx context.Context, req api.RebalanceRequest) (api.RebalancePlan, []byte, error) {
	var r api.RebalancePlan
	body, err := json.Marshal(req)
	if err != nil {
		return r, nil, &api.Error{Code: api.CodeInvalidArgument, Message: err.Error()}
	}
	raw, err := c.decode("/v1/rebalance", &r)(c.do(ctx, http.MethodPost, "/v1/rebalance", nil, body))
	return r, raw, err
}
