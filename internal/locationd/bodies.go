package locationd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// The JSON request bodies of the POST routes, decoded and checked without
// touching etcd or a node: POST /v1/relocations, /v1/groups,
// /v1/groups/join, /v1/groups/leave, /v1/owners/{id}/drain and
// /v1/rebalance. Every refusal is an invalid_argument (errInvalidArgument
// or keyspace.ErrInvalidName, which errorTable maps to 400). The routes
// bound the body with http.MaxBytesReader(maxRequestBody) before.

// errEmptyBody is decodeBody's answer to a body with no JSON value at all.
var errEmptyBody = errors.New("empty body")

// decodeBody reads body: exactly one JSON object (not null, not an array
// or a scalar) with only fields v knows, and nothing after it but white
// space. A body with no value at all is errEmptyBody (not wrapped: each
// route says what it wants instead); every other refusal wraps
// errInvalidArgument.
func decodeBody(body io.Reader, v any) error {
	var raw json.RawMessage
	dec := json.NewDecoder(body)
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return errEmptyBody
		}
		return fmt.Errorf("%w: body: %w", errInvalidArgument, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: body: data after the JSON object", errInvalidArgument)
	}
	if raw[0] != '{' { // RawMessage holds one value, white space trimmed
		return fmt.Errorf("%w: body: %.20s is not a JSON object", errInvalidArgument, raw)
	}
	strict := json.NewDecoder(bytes.NewReader(raw))
	strict.DisallowUnknownFields()
	if err := strict.Decode(v); err != nil {
		return fmt.Errorf("%w: body: %w", errInvalidArgument, err)
	}
	return nil
}

// decodeRelocateBody reads and checks a POST /v1/relocations body: the
// object, the target owner id if given, timeoutMs within bounds
// (defaultTimeout is only named in the refusal).
func decodeRelocateBody(body io.Reader, defaultTimeout time.Duration) (api.RelocateRequest, keyspace.Object, error) {
	var req api.RelocateRequest
	if err := decodeBody(body, &req); err != nil {
		if errors.Is(err, errEmptyBody) {
			return req, keyspace.Object{}, fmt.Errorf(`%w: empty body (want {"object":"actor/counter/c1","target":"n2","timeoutMs":10000})`, errInvalidArgument)
		}
		return req, keyspace.Object{}, err
	}
	if req.Object == "" {
		return req, keyspace.Object{}, fmt.Errorf(`%w: "object" is required`, errInvalidArgument)
	}
	obj, err := keyspace.ParseObject(req.Object)
	if err != nil {
		return req, keyspace.Object{}, err
	}
	if req.Target != "" {
		if err := keyspace.ValidateOwnerID(req.Target); err != nil {
			return req, keyspace.Object{}, fmt.Errorf("%w: target: %w", errInvalidArgument, err)
		}
	}
	if req.TimeoutMs < 0 || req.TimeoutMs > api.MaxRelocationTimeoutMs {
		return req, keyspace.Object{}, fmt.Errorf("%w: timeoutMs %d (want 0 for the default %s, or 1..%d)", errInvalidArgument, req.TimeoutMs, defaultTimeout, int64(api.MaxRelocationTimeoutMs))
	}
	return req, obj, nil
}

// The group operations of the POST routes.
const (
	groupCreate = "create" // POST /v1/groups
	groupJoin   = "join"   // POST /v1/groups/join
	groupLeave  = "leave"  // POST /v1/groups/leave
)

// decodeGroupBody reads and checks the body of group operation op: the
// group, the actor for a join or a leave (none for a create), "on" for a
// create only, timeoutMs for a join only and within bounds.
func decodeGroupBody(body io.Reader, op string) (api.GroupRequest, keyspace.Object, keyspace.Object, error) {
	needActor := op != groupCreate
	var req api.GroupRequest
	var g, a keyspace.Object
	if err := decodeBody(body, &req); err != nil {
		if errors.Is(err, errEmptyBody) {
			return req, g, a, fmt.Errorf(`%w: empty body (want {"group":"group/g1","actor":"actor/counter/c1"})`, errInvalidArgument)
		}
		return req, g, a, err
	}
	g, err := keyspace.ParseObject(req.Group)
	if err != nil {
		return req, g, a, err
	}
	if g.Kind != keyspace.KindGroup {
		return req, g, a, fmt.Errorf(`%w: "group" %q is not a group (want group/<id>)`, errInvalidArgument, req.Group)
	}
	switch {
	case needActor:
		if a, err = keyspace.ParseObject(req.Actor); err != nil {
			return req, g, a, err
		}
		if a.Kind != keyspace.KindActor {
			return req, g, a, fmt.Errorf(`%w: "actor" %q is not an actor (want actor/<type>/<id>; groups do not nest)`, errInvalidArgument, req.Actor)
		}
	case req.Actor != "":
		return req, g, a, fmt.Errorf(`%w: create takes no "actor"`, errInvalidArgument)
	}
	if req.On != "" {
		if needActor {
			return req, g, a, fmt.Errorf(`%w: "on" is for create only (a join goes to the actor's owner)`, errInvalidArgument)
		}
		if err := keyspace.ValidateOwnerID(req.On); err != nil {
			return req, g, a, fmt.Errorf("%w: on: %w", errInvalidArgument, err)
		}
	}
	if req.TimeoutMs != 0 && op != groupJoin {
		return req, g, a, fmt.Errorf(`%w: "timeoutMs" is for join only (the bound of an Actor Join's relocation)`, errInvalidArgument)
	}
	if req.TimeoutMs < 0 || req.TimeoutMs > api.MaxRelocationTimeoutMs {
		return req, g, a, fmt.Errorf("%w: timeoutMs %d (want 0 for the default, or 1..%d)", errInvalidArgument, req.TimeoutMs, int64(api.MaxRelocationTimeoutMs))
	}
	return req, g, a, nil
}

// decodeDrainBody reads and checks the optional POST
// /v1/owners/{id}/drain body: nothing (every default), or one object with
// concurrency and timeoutMs within bounds.
func decodeDrainBody(body io.Reader) (api.DrainRequest, error) {
	var req api.DrainRequest
	if err := decodeBody(body, &req); err != nil {
		if errors.Is(err, errEmptyBody) {
			return api.DrainRequest{}, nil
		}
		return req, err
	}
	if req.Concurrency < 0 || req.Concurrency > api.MaxDrainConcurrency {
		return req, fmt.Errorf("%w: concurrency %d (want 0 for the node's --drain-concurrency, or 1..%d)", errInvalidArgument, req.Concurrency, api.MaxDrainConcurrency)
	}
	if req.TimeoutMs < 0 || req.TimeoutMs > api.MaxDrainTimeoutMs {
		return req, fmt.Errorf("%w: timeoutMs %d (want 0 for the node's --drain-timeout, or 1..%d)", errInvalidArgument, req.TimeoutMs, int64(api.MaxDrainTimeoutMs))
	}
	return req, nil
}

// decodeRebalanceBody reads and checks a POST /v1/rebalance body; it
// returns the request and its budget (the default for 0).
func decodeRebalanceBody(body io.Reader) (api.RebalanceRequest, int, error) {
	var req api.RebalanceRequest
	if err := decodeBody(body, &req); err != nil {
		if errors.Is(err, errEmptyBody) {
			return req, 0, fmt.Errorf(`%w: empty body (want {"budget":32,"dryRun":false,"colocate":false})`, errInvalidArgument)
		}
		return req, 0, err
	}
	budget, err := checkBudget(req.Budget)
	if err != nil {
		return req, 0, err
	}
	return req, budget, nil
}
