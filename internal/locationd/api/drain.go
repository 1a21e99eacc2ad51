package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/meshloc/meshloc/pkg/keyspace"
)

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

// Drain asks locationd to drain the owner (POST /v1/owners/{id}/drain) and
// reads the answer as it comes: progress, if set, gets each event with its
// raw line; the report is returned. A drain ends by itself (bounded by its
// timeout); bound ctx above it: a ctx that ends first only stops the wait,
// not the drain. A drain that ran is not an error even when objects could
// not be moved: see the report's Failed. An owner id that is not valid
// (keyspace.ValidateOwnerID) is an *Error with CodeInvalidArgument, and
// nothing is sent.
func (c *Client) Drain(ctx context.Context, owner string, req DrainRequest, progress func(ev DrainEvent, raw []byte)) (DrainReport, error) {
	if err := keyspace.ValidateOwnerID(owner); err != nil {
		return DrainReport{}, &Error{Code: CodeInvalidArgument, Message: err.Error()}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return DrainReport{}, &Error{Code: CodeInvalidArgument, Message: err.Error()}
	}
	u := *c.base
	u.Path += "/v1/owners/" + url.PathEscape(owner) + "/drain"
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return DrainReport{}, &Error{Code: CodeInvalidArgument, Message: err.Error()}
	}
	hr.Header.Set("Accept", DrainContentType+", application/json")
	hr.Header.Set("Content-Type", JSONContentType)
	resp, err := c.hc.Do(hr)
	if err != nil {
		return DrainReport{}, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("locationd %s: %v", c.base, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		answer, _ := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
		return DrainReport{}, DecodeError(resp.StatusCode, answer)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), MaxBody)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var ev DrainEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return DrainReport{}, &Error{Code: CodeInternal, Message: fmt.Sprintf("locationd %s: undecodable drain event %q: %v", c.base, line, err)}
		}
		if progress != nil {
			progress(ev, line)
		}
		switch ev.Kind {
		case DrainKindReport:
			if ev.Report == nil {
				return DrainReport{}, &Error{Code: CodeInternal, Message: "locationd: a report line without a report"}
			}
			return *ev.Report, nil
		case DrainKindError:
			if ev.Error == nil {
				ev.Error = &Error{Code: CodeInternal, Message: "locationd: an error line without an error"}
			}
			return DrainReport{}, ev.Error
		}
	}
	msg := "the answer ended before the report"
	if err := sc.Err(); err != nil {
		msg = err.Error()
	}
	return DrainReport{}, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("locationd %s: drain of %s: %s; the drain may still run (see meshctl owners)", c.base, owner, msg)}
}
