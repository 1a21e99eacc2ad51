package api

import ()

// DrainRequest is the body of POST /v1/owners/{id}/drain (optional: an
// empty body takes every default).
type DrainRequest struct {
	// Concurrency: relocations at a time (0: the node's --drain-concurrency,
	// 4 by default). At most MaxDrainConcurrency.
	Concurrency int `json:"concurrency,omitempty"`
	// TimeoutMs bounds the drain (0: the node's --drain-timeout, 60 s by
	// default). At most MaxDrainTimeoutMs.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// StopAfter: the node stops once drained (its lease revoked last; a
	// meshnode process exits 0). Absent: true. false leaves it running,
	// draining: it takes no new object until it is restarted.
	StopAfter *bool `json:"stopAfter,omitempty"`
}

// Bounds of a DrainRequest.
const (
	MaxDrainConcurrency = 256
	MaxDrainTimeoutMs   = 60 * 60 * 1000
)

// DrainContentType is the media type of a drain's answer: one JSON object
// (a DrainEvent) per line.
const DrainContentType = "application/x-ndjson"

// Kinds of DrainEvent.
const (
	DrainKindStarted = "started" // Remaining: objects hosted at the start
	DrainKindMoved   = "moved"   // Object moved to Target
	DrainKindRetry   = "retry"   // an attempt did not move Object (Code, Message); another follows
	DrainKindFailed  = "failed"  // Object will not be moved (Code, Message)
	DrainKindReport  = "report"  // the last line: Report
	DrainKindError   = "error"   // the last line when the node's stream broke: Error
)

// DrainEvent is one line of the answer of POST /v1/owners/{id}/drain:
// progress lines, then one line of kind "report" (or "error" if locationd
// lost the node's stream: the drain may still run; see GET /v1/owners).
type DrainEvent struct {
	Kind   string `json:"kind"`
	Object string `json:"object,omitempty"`
	// Target is the owner pair "id@generation" of the attempt.
	Target string `json:"target,omitempty"`
	// Attempt is the object's relocation attempt, from 1.
	Attempt int `json:"attempt,omitempty"`
	// Code is the wire code name (ok, shutting_down, ...).
	Code               string `json:"code,omitempty"`
	Message            string `json:"message,omitempty"`
	RelocationID       string `json:"relocationId,omitempty"`
	InterruptionMicros int64  `json:"interruptionMicros,omitempty"`
	// Running totals, and the objects still hosted on the node.
	Moved     int `json:"moved"`
	Failed    int `json:"failed"`
	Remaining int `json:"remaining"`
	// Report, on the last line (kind "report").
	Report *DrainReport `json:"report,omitempty"`
	// Error, on the last line when the stream broke (kind "error").
	Error *Error `json:"error,omitempty"`
}

// DrainReport ends a drain.
type DrainReport struct {
	// Owner is the drained owner pair, "id@generation".
	Owner  string          `json:"owner"`
	Moved  []DrainedObject `json:"moved"`
	Failed []DrainFailure  `json:"failed"`
	// Started (RFC 3339, UTC) and its Unix milliseconds.
	Started        string `json:"started"`
	StartedUnixMs  int64  `json:"startedUnixMs"`
	DurationMicros int64  `json:"durationMicros"`
	// Relocations started, retries included.
	Relocations int `json:"relocations"`
	// Stopping: the node stops now.
	Stopping bool `json:"stopping"`
	// EndedEarly says why the drain stopped before every object was handled
	// (its deadline, the node stopping); "" when it finished.
	EndedEarly string `json:"endedEarly,omitempty"`
}

// DrainedObject is an object a drain moved.
type DrainedObject struct {
	Object             string `json:"object"`
	Target             string `json:"target"`
	RelocationID       string `json:"relocationId"`
	Attempts           int    `json:"attempts"`
	InterruptionMicros int64  `json:"interruptionMicros"`
}

// DrainFailure is an object a drain could not move: it is lost when the node
// stops (its next call re-creates it elsewhere, answered state_lost).
type DrainFailure struct {
	Object   string `json:"object"`
	Code     string `json:"code"`
	Reason   string `json:"reason"`
	Attempts int    `json:"attempts"`
}
