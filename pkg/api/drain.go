package api

import ()

// DrainRequest is the body of POST /v1/owners/{id}/drain (optional: an
// empty body takes every default).
type DrainRequest struct {
	// Concurrency: objects moved at a time, in bulk moves (0: the node's
	// --drain-concurrency, 512 by default). At most MaxDrainConcurrency.
	Concurrency int `json:"concurrency,omitempty"`
	// TimeoutMs is how long the drain may go without moving an object
	// (0: the node's --drain-timeout, 60 s by default); a drain that keeps
	// moving objects goes on, at most MaxDrainTimeoutMs in all.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// List: after the report, lines of kind "page" list every object moved
	// and not moved (at most 1,000 each).
	List bool `json:"list,omitempty"`
	// StopAfter: the node stops once drained (its lease revoked last; a
	// meshnode process exits 0). Absent: true. false leaves it running,
	// draining: it takes no new object until it is restarted.
	StopAfter *bool `json:"stopAfter,omitempty"`
}

// Bounds of a DrainRequest.
const (
	MaxDrainConcurrency = 4096
	MaxDrainTimeoutMs   = 60 * 60 * 1000
)

// DrainContentType is the media type of a drain's answer: one JSON object
// (a DrainEvent) per line.
const DrainContentType = "application/x-ndjson"

// Kinds of DrainEvent.
const (
	DrainKindStarted  = "started"  // Remaining: objects hosted at the start
	DrainKindProgress = "progress" // the running totals, at most a few times a second
	DrainKindFailed   = "failed"   // Object will not be moved (Code, Message): the first 100
	DrainKindReport   = "report"   // Report: the counts and the first 100 objects not moved
	DrainKindPage     = "page"     // with List, after the report: Page
	DrainKindError    = "error"    // the last line when the node's stream broke: Error
)

// DrainEvent is one line of the answer of POST /v1/owners/{id}/drain:
// progress lines, then one line of kind "report", then with List the
// pages of the full list (or a line of kind "error" if locationd lost the
// node's stream: the drain may still run; see GET /v1/owners). Every line
// is bounded, however many objects the node holds.
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
	// Report, on the line of kind "report".
	Report *DrainReport `json:"report,omitempty"`
	// Page, on the lines of kind "page".
	Page *DrainPage `json:"page,omitempty"`
	// Error, on the last line when the stream broke (kind "error").
	Error *Error `json:"error,omitempty"`
}

// DrainReport ends a drain.
type DrainReport struct {
	// Owner is the drained owner pair, "id@generation".
	Owner string `json:"owner"`
	// MovedCount and FailedCount: the objects moved and not moved.
	MovedCount  int `json:"movedCount"`
	FailedCount int `json:"failedCount"`
	// Moved: empty on the wire (the pages list them); pkg/client fills it
	// from the pages when the request asked for the list.
	Moved []DrainedObject `json:"moved,omitempty"`
	// Failed: the first 100 objects not moved (all of them, from the
	// pages, when the list was asked for).
	Failed []DrainFailure `json:"failed"`
	// Bulks: the bulk moves the drain made.
	Bulks int `json:"bulks"`
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

// DrainPage is one page of a drain's full list (at most 1,000 objects);
// Last says it is the last.
type DrainPage struct {
	Moved  []DrainedObject `json:"moved,omitempty"`
	Failed []DrainFailure  `json:"failed,omitempty"`
	Last   bool            `json:"last"`
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
