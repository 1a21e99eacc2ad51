package locationd

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/meshloc/meshloc/pkg/api"
)

// eventsRoute is the event stream's route.
const eventsRoute = "/v1/events"

// sseRetryMs is the reconnection delay a client is told (retry:).
const sseRetryMs = 2000

// eventsHTTP serves GET /v1/events: a text/event-stream (docs/operating/monitoring.md,
// "Event stream"). Bad parameters or a bad Last-Event-ID are a typed 400, one
// stream past --events-max-streams a typed 429, before anything is
// streamed.
func (h *handlers) eventsHTTP(w http.ResponseWriter, r *http.Request) {
	s := h.s
	f, err := parseEventsQuery(r.URL.RawQuery, r.Header.Get("Last-Event-ID"))
	if err != nil {
		s.writeError(w, r, eventsRoute, err)
		return
	}
	c, replay, resumed, err := h.events.join(f)
	if err != nil {
		s.writeError(w, r, eventsRoute, err)
		return
	}
	defer h.events.leave(c)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no") // a proxy must not hold the stream back
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	rc := http.NewResponseController(w)
	var buf bytes.Buffer
	// flush writes buf within --http-write-timeout from now: a client that
	// does not read is cut off, it cannot hold the stream's goroutine.
	flush := func() bool {
		if err := rc.SetWriteDeadline(time.Now().Add(s.cfg.HTTPWriteTimeout)); err != nil {
			return false
		}
		if _, err := w.Write(buf.Bytes()); err != nil {
			return false
		}
		buf.Reset()
		return rc.Flush() == nil
	}
	buf.WriteString("retry: " + strconv.Itoa(sseRetryMs) + "\n")
	writeSSE(&buf, "", EventHello, mustJSON(api.Hello{Epoch: h.events.epoch, Resumed: resumed}))
	for _, ev := range replay {
		writeSSE(&buf, h.events.id(ev.seq), ev.typ, ev.data)
	}
	if !flush() {
		return
	}
	beat := time.NewTicker(s.cfg.Events.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case ev := <-c.ch:
			writeSSE(&buf, h.events.id(ev.seq), ev.typ, ev.data)
			// What else is ready goes in the same write.
			for more := true; more && buf.Len() < 64<<10; {
				select {
				case ev := <-c.ch:
					writeSSE(&buf, h.events.id(ev.seq), ev.typ, ev.data)
				default:
					more = false
				}
			}
		case now := <-beat.C:
			writeSSE(&buf, "", EventHeartbeat, mustJSON(map[string]string{"time": now.UTC().Format(timeLayout)}))
		case <-c.dropped:
			s.m.eventsDropped.Inc()
			writeSSE(&buf, "", EventOverflow, mustJSON(map[string]any{
				"buffer": s.cfg.Events.Buffer, "message": "this client fell behind the stream: reconnect (Last-Event-ID resumes what is still kept)"}))
			flush()
			return
		case <-h.events.done:
			return
		case <-r.Context().Done():
			return
		}
		if !flush() {
			return
		}
	}
}

// timeLayout is the API's time format (RFC 3339, milliseconds, UTC).
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// writeSSE appends one event (data is one line of JSON).
func writeSSE(b *bytes.Buffer, id, typ string, data []byte) {
	if id != "" {
		b.WriteString("id: " + id + "\n")
	}
	b.WriteString("event: " + typ + "\ndata: ")
	b.Write(data)
	b.WriteString("\n\n")
}

// mustJSON is v's JSON (v is always encodable: the stream's own types).
func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
