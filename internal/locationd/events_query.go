package locationd

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// Event types of GET /v1/events (docs/operating/monitoring.md, "Event stream"; pkg/api names
// them for clients too). hello, overflow and heartbeat are the stream's own
// and always sent.
const (
	EventHello      = api.EventHello
	EventOwner      = api.EventOwner
	EventRecord     = api.EventRecord
	EventRelocation = api.EventRelocation
	EventStats      = api.EventStats
	EventWatch      = api.EventWatch
	EventReset      = api.EventReset
	EventHeartbeat  = api.EventHeartbeat
	EventOverflow   = api.EventOverflow
)

// filterableEvents are the types a client may choose with ?types=.
var filterableEvents = []string{EventOwner, EventRecord, EventRelocation, EventStats, EventWatch, EventReset}

// eventFilter is what one client of the stream asked for.
type eventFilter struct {
	types  map[string]bool // nil: every type
	object string          // "": every object
	// after is the resume point (Last-Event-ID): epoch and sequence; zero
	// epoch: none.
	epoch string
	after uint64
}

// wants reports whether ev goes to this client.
func (f *eventFilter) wants(ev *event) bool {
	if f.types != nil && !f.types[ev.typ] {
		return false
	}
	return f.object == "" || ev.object == "" || ev.object == f.object
}

// maxEventIDLen bounds Last-Event-ID: an epoch, "-", a uint64.
const maxEventIDLen = epochLen + 1 + 20

// parseEventsQuery reads ?types=a,b&object=O and the resume point
// (lastEventId, a Last-Event-ID header value: "" for none). Everything is
// checked: an unknown or repeated parameter, an unknown type, a malformed
// object or id is errInvalidArgument, and nothing is opened.
func parseEventsQuery(rawQuery, lastEventID string) (eventFilter, error) {
	var f eventFilter
	vals, err := url.ParseQuery(rawQuery)
	if err != nil {
		return f, fmt.Errorf("%w: query: %w", errInvalidArgument, err)
	}
	for k, vs := range vals {
		if len(vs) != 1 {
			return f, fmt.Errorf("%w: query parameter %q given %d times", errInvalidArgument, k, len(vs))
		}
		v := vs[0]
		switch k {
		case "types":
			f.types = map[string]bool{}
			for _, t := range strings.Split(v, ",") {
				if !contains(filterableEvents, t) {
					return f, fmt.Errorf("%w: types: unknown event type %q (known: %s)", errInvalidArgument, t, strings.Join(filterableEvents, ", "))
				}
				f.types[t] = true
			}
		case "object":
			obj, err := keyspace.ParseObject(v)
			if err != nil {
				return f, fmt.Errorf("%w: object: %w", errInvalidArgument, err)
			}
			f.object = obj.String()
		case "lastEventId": // for clients that cannot set the header
			if lastEventID == "" {
				lastEventID = v
			} else if v != lastEventID {
				return f, fmt.Errorf("%w: lastEventId %q and Last-Event-ID %q differ", errInvalidArgument, v, lastEventID)
			}
		default:
			return f, fmt.Errorf("%w: unknown query parameter %q (known: types, object, lastEventId)", errInvalidArgument, k)
		}
	}
	if lastEventID != "" {
		if f.epoch, f.after, err = parseEventID(lastEventID); err != nil {
			return f, err
		}
	}
	return f, nil
}

// parseEventID reads "<epoch>-<sequence>" (an id this server gave).
func parseEventID(s string) (string, uint64, error) {
	bad := func(why string) error {
		if len(s) > maxEventIDLen {
			s = s[:maxEventIDLen] + "…"
		}
		return fmt.Errorf("%w: Last-Event-ID %q: %s (want <epoch>-<sequence>, as the stream's ids)", errInvalidArgument, s, why)
	}
	if len(s) > maxEventIDLen {
		return "", 0, bad("too long")
	}
	epoch, seq, ok := strings.Cut(s, "-")
	if !ok || len(epoch) != epochLen || strings.Trim(epoch, "0123456789abcdef") != "" {
		return "", 0, bad("bad epoch")
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil || n == 0 || seq != strconv.FormatUint(n, 10) {
		return "", 0, bad("bad sequence")
	}
	return epoch, n, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}
