package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/tracing"
)

// EventsQuery chooses what GET /v1/events sends.
type EventsQuery struct {
	// Types keeps these event types (api.EventRelocation, ...); nil: all.
	// hello, heartbeat and overflow are always sent.
	Types []string
	// Object keeps this object's record and relocation events only.
	Object string
	// Idle, if not 0: a stream that sends nothing for this long (not even
	// locationd's heartbeat, every --events-heartbeat, 15 s by default) is
	// taken for hung and opened again.
	Idle time.Duration
}

// Event is one event of the stream.
type Event struct {
	// ID is the event's id, or the last one before it for an event that
	// has none (hello, heartbeat); "" before the first.
	ID string
	// Type is one of api.EventHello, api.EventRelocation, ...
	Type string
	// Data is its JSON (decode it into the type's shape: api.Hello,
	// api.Relocation, api.NodeWatch, ...).
	Data json.RawMessage
}

// Reconnection delays of Events: the server's retry: field, bounded, or
// eventsRetry before it said one.
const (
	eventsRetry    = 2 * time.Second
	eventsRetryMin = 10 * time.Millisecond
	eventsRetryMax = 30 * time.Second
)

// Events follows GET /v1/events until ctx ends (it returns ctx's error) or
// f returns an error (returned as it is). f is called with each event in
// order, from this goroutine; every connection starts with an api.Hello
// whose Resumed false says events may have been missed (read the
// snapshots again: owners, objects, relocations).
//
// A stream that breaks, and an answer that says to retry (429, 5xx) or
// none at all, is opened again after the delay the server asked for, from
// after the last event seen (Last-Event-ID). A refusal that would not change
// on retry (a bad query: 400; a role that may not read: 403; ...) is
// returned as an *api.Error at once, as is a stream that breaks the format
// (not text/event-stream, an event over MaxEventBytes).
func (c *Admin) Events(ctx context.Context, q EventsQuery, f func(Event) error) error {
	if f == nil || q.Idle < 0 {
		return &api.Error{Code: api.CodeInvalidArgument, Message: "Events needs a function for the events and an Idle of 0 or more"}
	}
	if q.Object != "" {
		if _, err := keyspace.ParseObject(q.Object); err != nil {
			return &api.Error{Code: api.CodeInvalidArgument, Message: err.Error()}
		}
	}
	v := url.Values{}
	if len(q.Types) > 0 {
		v.Set("types", strings.Join(q.Types, ","))
	}
	if q.Object != "" {
		v.Set("object", q.Object)
	}
	lastID, retry := "", eventsRetry
	for {
		rd, err := c.follow(ctx, v, q.Idle, lastID, f)
		if rd != nil {
			lastID = rd.lastID
			if rd.retry > 0 {
				retry = min(max(rd.retry, eventsRetryMin), eventsRetryMax)
			}
		}
		var stop stopErr
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &stop):
			return stop.err
		case !retryable(err):
			return err
		}
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// stopErr carries an error of f: Events returns it as it is.
type stopErr struct{ err error }

func (e stopErr) Error() string { return e.err.Error() }

// retryable reports whether Events opens the stream again after err: the
// transport failed or the stream ended, or the server said to retry.
func retryable(err error) bool {
	e, ok := api.AsError(err)
	switch {
	case !ok:
		return false // the stream broke the format
	case e.Status == http.StatusTooManyRequests || e.Status >= 500:
		return true
	}
	return e.Status == 0 && e.Code == api.CodeUnavailable
}

// follow opens the stream once and hands its events to f until it ends;
// the reader (nil if none was opened) says where it stopped.
func (c *Admin) follow(ctx context.Context, v url.Values, idle time.Duration, lastID string, f func(Event) error) (*sseReader, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if idle > 0 {
		// The request's context ends once the stream was silent for idle:
		// the read in progress fails, and the stream is opened again.
		t := time.AfterFunc(idle, cancel)
		defer t.Stop()
		f0 := f
		f = func(ev Event) error { t.Reset(idle); return f0(ev) }
	}
	u := *c.base
	u.Path += "/v1/events"
	u.RawQuery = v.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, &api.Error{Code: api.CodeInvalidArgument, Message: err.Error()}
	}
	req.Header.Set("Accept", "text/event-stream")
	tracing.InjectHTTP(ctx, req.Header)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf("locationd %s: %v", c.base, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		answer, _ := io.ReadAll(io.LimitReader(resp.Body, api.MaxBody))
		return nil, api.DecodeError(resp.StatusCode, answer)
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || mt != "text/event-stream" {
		return nil, &api.Error{Code: api.CodeInternal, Message: fmt.Sprintf("locationd %s/v1/events: answered %q, not text/event-stream", c.base, resp.Header.Get("Content-Type"))}
	}
	rd := newSSEReader(resp.Body)
	rd.lastID = lastID
	for {
		ev, err := rd.next()
		if err != nil {
			if errors.Is(err, errEventTooLarge) {
				return rd, fmt.Errorf("locationd %s/v1/events: %w", c.base, err)
			}
			return rd, &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf("locationd %s/v1/events: stream ended: %v", c.base, err)}
		}
		if err := f(ev); err != nil {
			return rd, stopErr{err}
		}
	}
}
