// Package api is the HTTP JSON interface of locationd: the shapes it takes
// and answers with, and its typed errors. The server (internal/locationd)
// and the Go client (pkg/client, its Admin) share it, so both sides agree on
// one definition of every field; it imports neither etcd nor the server.
//
// Routes (GET unless marked; every error is an [Error] body with the matching
// status). A POST with a non-empty body must send it as Content-Type
// application/json (a charset parameter, if any, utf-8); any other is refused
// with 415 unsupported_media_type. pkg/client always sends it.
//
//	/v1/owners                                   live owners              → OwnersResponse
//	/v1/objects?kind=actor|group&owner=ID&orphaned=true|false&contains=S → ObjectsResponse
//	            &limit=N&after=NAME&revision=R   one page of them (ObjectsQuery)
//	/v1/objects/{object}                         one object, e.g. actor/counter/c1 → ObjectResponse
//	POST /v1/relocations  RelocateRequest        move one object; answers when it ended → Relocation
//	                                             ("wait": false: at once, 202, in flight → Relocation)
//	/v1/relocations?object=O&inflight=true|false relocations of every live node → RelocationsResponse
//	/v1/relocations/{id}                         one relocation, while it runs and after → Relocation
//	POST /v1/groups, /v1/groups/join, /v1/groups/leave  GroupRequest  groups (groups.go) → Group
//	/v1/groups/{group}                           a group, e.g. group/g1   → Group
//	/v1/controllers                              who leads the recovery controller, orphans → ControllersResponse
//	/v1/etcd                                     etcd's sizes, alarms and compaction → EtcdStatus
//	/v1/rebalance/plan?budget=N                  the rebalancer's plan, moving nothing → RebalancePlan
//	POST /v1/rebalance  RebalanceRequest         run (or with dryRun, only make) a plan → RebalancePlan
//	/healthz                                     the process is up        → {"status":"ok"}
//	/readyz                                      etcd answers a read, no alarm → {"status":"ok"}
//	/metrics                                     Prometheus text format
package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/meshloc/meshloc/pkg/record"
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
	Object string        `json:"object"`
	Record record.Record `json:"record"`
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
	// Next, in a page (limit given), is the after of the next page: the
	// listing goes on. Empty: it ended.
	Next string `json:"next,omitempty"`
}

// ObjectResponse answers GET /v1/objects/{object}.
type ObjectResponse struct {
	Object
	// Revision is the etcd revision record and owner key were read at.
	Revision int64 `json:"revision"`
	// History (?history=N, 1..MaxHistory) is the record's earlier versions,
	// newest first, read back from etcd's history: at most N, fewer when
	// the record was created since or etcd compacted what came before
	// (HistoryCompacted).
	History          []RecordVersion `json:"history,omitempty"`
	HistoryCompacted bool            `json:"historyCompacted,omitempty"`
}

// RecordVersion is one earlier version of an authority record: the record
// as it was from StoreVersion (its ModRevision then) until the next write.
type RecordVersion struct {
	Record       record.Record `json:"record"`
	StoreVersion int64         `json:"storeVersion"`
}

// MaxHistory bounds ?history= of GET /v1/objects/{object}.
const MaxHistory = 64

// RelocateRequest is the body of POST /v1/relocations.
type RelocateRequest struct {
	// Object to move, e.g. actor/counter/c1 (required).
	Object string `json:"object"`
	// Target owner id; empty: the owner's placement chooses a live, serving
	// node with weight > 0 that hosts the type.
	Target string `json:"target,omitempty"`
	// TimeoutMs is the relocation's deadline from its start, in milliseconds;
	// 0: locationd's --relocation-timeout. At most MaxRelocationTimeoutMs.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// Wait false answers as soon as the owner took the relocation: 202
	// Accepted with the Relocation in flight (its id; phase "pacing" while
	// a background one waits for the owner's pacing); follow it with
	// GET /v1/relocations/{id}. Absent or true: the answer comes when it
	// ended.
	Wait *bool `json:"wait,omitempty"`
	// Foreground: the owner starts it at once. Otherwise it is background
	// work: while the owner's calls are slow it waits for the owner's
	// pacing first, at most half its timeout (then 429 resource_exhausted,
	// nothing done).
	Foreground bool `json:"foreground,omitempty"`
	// NoPrecopy: the sealed state moves whole, without a pre-copy, whatever
	// the owner's --precopy-min-bytes.
	NoPrecopy bool `json:"noPrecopy,omitempty"`
}

// MaxRelocationTimeoutMs bounds RelocateRequest.TimeoutMs (10 minutes).
const MaxRelocationTimeoutMs = 10 * 60 * 1000

// Relocation is one relocation as a node reports it (one side of it: the
// source and the target each report their own, with Role "source" or
// "target").
type Relocation struct {
	// RelocationID is the relocation's UUID.
	RelocationID string `json:"relocationId"`
	Object       string `json:"object"`
	// Source and Target are owner pairs, "id@generation".
	Source string `json:"source"`
	Target string `json:"target"`
	// Role of the reporting node: "source" or "target".
	Role string `json:"role"`
	// Node is the owner id of the node that reported it.
	Node string `json:"node"`
	// Phase is the protocol phase reached (the last one when it ended).
	Phase string `json:"phase"`
	// Outcome is completed, aborted (the source kept the object), failed,
	// or shutdown; "" while in flight.
	Outcome string `json:"outcome"`
	// Code is the outcome's wire code name (ok, deadline_exceeded,
	// unavailable, ...); Message says why, when it did not complete.
	Code    string `json:"code"`
	Message string `json:"message"`
	// Started and Ended are RFC 3339 times in UTC ("" when unknown or in
	// flight), with the same instants in Unix milliseconds.
	Started       string `json:"started"`
	StartedUnixMs int64  `json:"startedUnixMs"`
	Ended         string `json:"ended"`
	EndedUnixMs   int64  `json:"endedUnixMs"`
	// InterruptionMicros is how long the object served nothing (0 when
	// unknown or not reached). Role target: from the seal on the source to
	// the admission on the target, by the two nodes' clocks. Role source:
	// from the seal to the target's OUTCOME (or the commit seen in etcd),
	// one hop more; POST /v1/relocations answers with the source's.
	InterruptionMicros int64 `json:"interruptionMicros"`
	// SealedUnixMicros (role source) and AdmittedUnixMicros (role target)
	// are when the object stopped and started serving, by that node's
	// clock; 0 when unknown.
	SealedUnixMicros   int64 `json:"sealedUnixMicros,omitempty"`
	AdmittedUnixMicros int64 `json:"admittedUnixMicros,omitempty"`
	// PayloadBytes is the size of the captured state.
	PayloadBytes uint64 `json:"payloadBytes"`
	// PrecopyBytes and SealedBytes (role source): STATE bytes sent while
	// the object still served (a pre-copy's base), and after the seal.
	PrecopyBytes uint64 `json:"precopyBytes,omitempty"`
	SealedBytes  uint64 `json:"sealedBytes,omitempty"`
	// Timeline is the steps this side went through, in order, each with
	// when it began by this node's clock; the last is "done" once ended
	// (see Phases).
	Timeline []TimelineMark `json:"timeline,omitempty"`
	// TraceID is the OpenTelemetry trace of the relocation's spans (both
	// sides share it); absent when it was not sampled or tracing is off.
	TraceID string `json:"traceId,omitempty"`
}

// InFlight reports whether the relocation has not ended yet.
func (r Relocation) InFlight() bool { return r.Outcome == "" }

// Outcomes of a relocation.
const (
	OutcomeCompleted = "completed"
	OutcomeAborted   = "aborted"
	OutcomeFailed    = "failed"
	OutcomeShutdown  = "shutdown"
	// OutcomeRefused: an object of a bulk move that was not started
	// (nothing written; it serves where it was).
	OutcomeRefused = "refused"
)

// UnreachableNode is a live owner that did not answer GET /v1/relocations in
// time (its relocations are missing from the list).
type UnreachableNode struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Error   string `json:"error"`
}

// RelocationsResponse answers GET /v1/relocations: the in-flight relocations
// first (newest start first), then the ended ones, the most recently ended
// first.
type RelocationsResponse struct {
	Relocations []Relocation      `json:"relocations"`
	Unreachable []UnreachableNode `json:"unreachable"`
}

// Status answers /healthz and /readyz.
type Status struct {
	Status string `json:"status"`
}

// Error codes: the "code" of an error body, and the first word of meshctl's
// error line.
const (
	CodeInvalidArgument      = "invalid_argument"       // 400: bad input; nothing was changed
	CodePermissionDenied     = "permission_denied"      // 403: the caller's certificate's role may not do this
	CodeNotFound             = "not_found"              // 404: no such object or route
	CodeMethodNotAllowed     = "method_not_allowed"     // 405: the route exists for other methods
	CodeConflict             = "conflict"               // 409: the cluster's state does not allow it now (e.g. already relocating)
	CodeResourceExhausted    = "resource_exhausted"     // 429: over a limit (a group's size, etcd's request rate); nothing was changed
	CodeUnsupportedMediaType = "unsupported_media_type" // 415: a POST body that is not Content-Type application/json; nothing was changed
	CodeUnavailable          = "unavailable"            // 503: etcd did not answer in time; retry
	CodeInternal             = "internal"               // 500: a bug
	CodeCorruptRecord        = "corrupt_record"         // 500: etcd's record of the object does not decode; nothing is served for it until an operator repairs or deletes it
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
	ErrInvalidArgument      = &Error{Code: CodeInvalidArgument}
	ErrPermissionDenied     = &Error{Code: CodePermissionDenied}
	ErrNotFound             = &Error{Code: CodeNotFound}
	ErrConflict             = &Error{Code: CodeConflict}
	ErrUnsupportedMediaType = &Error{Code: CodeUnsupportedMediaType}
	ErrUnavailable          = &Error{Code: CodeUnavailable}
	ErrInternal             = &Error{Code: CodeInternal}
)

// ErrorBody is the JSON envelope of an Error.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// statuses is the one table of error codes and their HTTP statuses; a code
// not in it is 500, like CodeInternal.
var statuses = []struct {
	code   string
	status int
}{
	{CodeInvalidArgument, http.StatusBadRequest},
	{CodePermissionDenied, http.StatusForbidden},
	{CodeNotFound, http.StatusNotFound},
	{CodeMethodNotAllowed, http.StatusMethodNotAllowed},
	{CodeConflict, http.StatusConflict},
	{CodeUnsupportedMediaType, http.StatusUnsupportedMediaType},
	{CodeResourceExhausted, http.StatusTooManyRequests},
	{CodeUnavailable, http.StatusServiceUnavailable},
	{CodeInternal, http.StatusInternalServerError},
	{CodeCorruptRecord, http.StatusInternalServerError},
}

// Known reports whether code is one of the API's error codes.
func Known(code string) bool {
	for _, s := range statuses {
		if s.code == code {
			return true
		}
	}
	return false
}

// StatusOf is the HTTP status of an error code.
func StatusOf(code string) int {
	for _, s := range statuses {
		if s.code == code {
			return s.status
		}
	}
	return http.StatusInternalServerError
}

// CodeOfStatus is the error code of an HTTP status (of an answer without a
// JSON body, a proxy's, say; of a wire code's status, wire.HTTPStatus): the
// table's, and unavailable for a proxy's 502 and 504.
func CodeOfStatus(status int) string {
	for _, s := range statuses {
		if s.status == status {
			return s.code
		}
	}
	if status == http.StatusGatewayTimeout || status == http.StatusBadGateway {
		return CodeUnavailable
	}
	return CodeInternal
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
	return &Error{Code: CodeOfStatus(status), Message: msg, Status: status}
}

// AsError returns err as an *Error when it is one (wrapped or not).
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
