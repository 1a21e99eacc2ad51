// Package api is the HTTP JSON interface of locationd: the shapes it answers
// with, its typed errors, and a small client (meshctl's, and the tests').
//
// It is shared by the server (internal/locationd) and its clients so that both
// sides agree on one definition of every field. It imports neither etcd nor the
// server, so a client binary stays small.
//
// Routes (all GET; every error is an [Error] body with the matching status):
//
//	/v1/owners                                   live owners              → OwnersResponse
//	/v1/objects?kind=actor|group&owner=ID&orphaned=true|false             → ObjectsResponse
//	/v1/objects/{object}                         one object, e.g. actor/counter/c1 → ObjectResponse
//	/healthz                                     the process is up        → {"status":"ok"}
//	/readyz                                      etcd answers a read       → {"status":"ok"}
//	/metrics                                     Prometheus text format
package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/meshloc/meshloc/pkg/authority"
)

// Owner is one live owner (a running meshnode), as read from owners/<id>.
type Owner struct {
	ID string `json:"id"`
	// Generation is the CreateRevision of owners/<id>: with ID, the owner pair.
	Generation int64 `json:"generation"`
	// RoutingID is 16 bytes in lowercase hex, new at every process start.
	RoutingID          string   `json:"routingId"`
	Address            string   `json:"address"`
	State              string   `json:"state"`
	Weight             int      `json:"weight"`
	ApplicationVersion string   `json:"applicationVersion"`
	Types              []string `json:"types"`
	// Started is the process start time, RFC 3339 in UTC ("" when unknown).
	Started       string `json:"started"`
	StartedUnixMs int64  `json:"startedUnixMs"`
	// HTTP is the owner's metrics and health address, if it advertises one.
	HTTP string `json:"http,omitempty"`
	// LeaseID is the etcd lease the key is bound to, in hex as etcdctl prints
	// it (`etcdctl lease timetolive <leaseId>`); a string because lease ids
	// exceed the integers JSON readers keep exactly.
	LeaseID string `json:"leaseId"`
	// ModRevision of the owner key: changes when the descriptor is rewritten.
	ModRevision int64 `json:"modRevision"`
}

// OwnersResponse answers GET /v1/owners.
type OwnersResponse struct {
	// Revision is the etcd revision the owners were read at.
	Revision int64   `json:"revision"`
	Owners   []Owner `json:"owners"`
}

// Object is one authority record with what is known about its owner.
type Object struct {
	// Object is the canonical name, e.g. actor/counter/c1.
	Object string           `json:"object"`
	Record authority.Record `json:"record"`
	// StoreVersion is the ModRevision of the authority key.
	StoreVersion int64 `json:"storeVersion"`
	// OwnerAlive: at the same revision as the record, owners/<record.owner.id>
	// exists with CreateRevision = record.owner.generation.
	OwnerAlive bool `json:"ownerAlive"`
}

// ObjectsResponse answers GET /v1/objects.
type ObjectsResponse struct {
	// Revision is the one etcd revision the records and owners were read at.
	Revision int64    `json:"revision"`
	Objects  []Object `json:"objects"`
}

// ObjectResponse answers GET /v1/objects/{object}.
type ObjectResponse struct {
	Object
	// Revision is the etcd revision record and owner key were read at.
	Revision int64 `json:"revision"`
}

// Status answers /healthz and /readyz.
type Status struct {
	Status string `json:"status"`
}

// Error codes: the "code" of an error body, and the first word of meshctl's
// error line.
const (
	CodeInvalidArgument  = "invalid_argument"   // 400: bad input; nothing was changed
	CodeNotFound         = "not_found"          // 404: no such object or route
	CodeMethodNotAllowed = "method_not_allowed" // 405: the route exists for other methods
	CodeUnavailable      = "unavailable"        // 503: etcd did not answer in time; retry
	CodeInternal         = "internal"           // 500: a bug or a corrupt record
)

// Error is a typed API error. It is the body {"error":{"code","message"}} of
// every non-2xx answer, and the error the Client returns for it.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Status is the HTTP status it came with (not part of the body).
	Status int `json:"-"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Is matches another *Error by code, so errors.Is(err, api.ErrNotFound) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Message == ""
}

// Sentinels to compare with errors.Is; they match any message.
var (
	ErrInvalidArgument = &Error{Code: CodeInvalidArgument}
	ErrNotFound        = &Error{Code: CodeNotFound}
	ErrUnavailable     = &Error{Code: CodeUnavailable}
	ErrInternal        = &Error{Code: CodeInternal}
)

// ErrorBody is the JSON envelope of an Error.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// StatusOf is the HTTP status of an error code.
func StatusOf(code string) int {
	switch code {
	case CodeInvalidArgument:
		return http.StatusBadRequest
	case CodeNotFound:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// codeOf is the error code of an HTTP status, for answers without a JSON body
// (a proxy's, say).
func codeOf(status int) string {
	switch {
	case status == http.StatusBadRequest:
		return CodeInvalidArgument
	case status == http.StatusNotFound:
		return CodeNotFound
	case status == http.StatusMethodNotAllowed:
		return CodeMethodNotAllowed
	case status == http.StatusServiceUnavailable, status == http.StatusGatewayTimeout, status == http.StatusBadGateway:
		return CodeUnavailable
	default:
		return CodeInternal
	}
}

// DecodeError turns a non-2xx answer into an *Error: the JSON body when there
// is one, else a code derived from the status.
func DecodeError(status int, body []byte) *Error {
	var b ErrorBody
	if err := json.Unmarshal(body, &b); err == nil && b.Error != nil && b.Error.Code != "" {
		b.Error.Status = status
		return b.Error
	}
	msg := http.StatusText(status)
	if len(body) > 0 {
		const max = 200
		s := string(body)
		if len(s) > max {
			s = s[:max] + "…"
		}
		msg = fmt.Sprintf("%s: %s", msg, s)
	}
	return &Error{Code: codeOf(status), Message: msg, Status: status}
}

// AsError returns err as an *Error when it is one (wrapped or not).
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
